"""Roofline step-time model of one vLLM V1 replica, calibrated on operator timings.

A step's GPU work is the sum of operator terms, each ``max``-like in a memory time (bytes over an
achieved fraction of HBM bandwidth) and a compute time (FLOPs over an achieved fraction of dense
peak): the matmul weights read once per step and the linear-layer FLOPs of every token; decode
attention reading the KV cache; prefill attention FLOPs; the LM head with sampling; norms, rotary,
activation and KV writes; the tensor-parallel all-reduces; and a small gap per kernel. The step
then costs ``fixed overhead + max(GPU work, CPU launch time)``: with CUDA graphs (pure-decode
steps) the CPU launches nothing per kernel, in eager steps it launches every kernel and the GPU
may outrun it. docs/simulator-calibration.md explains each term, the fit and its errors.

The achieved fractions are fitted by models.calibration on shared/reference/h200-llama-ops.csv
(a copy ships in models/data/) and stored in models/data/steptime_coefficients.json. They are
fractions of the H200's peaks and are applied to other GPUs' peaks as they are — an assumption.

Speed: the simulator prices about a million steps per simulated hour, so everything that depends
only on the token count is tabulated at construction and ``step_time_s`` is a few list lookups and
multiplications (about 1 µs in CPython; bench/steptime_error.py measures it).
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Mapping
from dataclasses import MISSING, asdict, dataclass, fields
from enum import StrEnum
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from inferledger.core.errors import BadInputError
from models.execution_time import StepShape
from models.gpu_catalog import GpuSpec, Precision, get_gpu, parse_precision
from models.model_catalog import (
    DEFAULT_BLOCK_SIZE,
    DEFAULT_GPU_MEMORY_UTILIZATION,
    DEFAULT_OVERHEAD_BYTES,
    KvCapacity,
    ModelConfig,
    ModelProfile,
    kv_cache_capacity,
    make_profile,
)

COEFFICIENTS_FORMAT = 1

# Kernels per layer in a vLLM forward pass after torch.compile fusion: 2 fused residual+RMSNorm,
# qkv, rotary, KV-cache write, attention, o, gate_up, SiLU·mul, down (+2 all-reduces at TP > 1);
# per step: embedding, final norm, LM head, logits gather and two sampler kernels.
KERNELS_PER_LAYER = 10
KERNELS_PER_STEP = 6
# Bytes of fp32 logits each sampled sequence moves: write, softmax read+write, sample read.
SAMPLING_BYTES_PER_VOCAB_ENTRY = 16
# vLLM V1 captures CUDA graphs for batches up to 512 tokens by default.
DEFAULT_CUDAGRAPH_MAX_TOKENS = 512
DEFAULT_TABLE_TOKENS = 16384


@dataclass(frozen=True, slots=True)
class StepTimeCoefficients:
    """Achieved fractions of peak and fixed costs. Times in seconds.

    The first group is fitted on operator timings (models.calibration); the last three are
    assumptions that single-GPU operator timings cannot measure (``step_overhead_s`` is refitted
    when the calibration CSV has whole-step rows).
    """

    linear_launch_s: float  # eager dispatch gap per linear kernel, as the operator timings see it
    attn_prefill_launch_s: float
    attn_decode_launch_s: float
    linear_bf16_bw_fraction: float
    linear_fp8_bw_fraction: float
    linear_bf16_flops_fraction: float
    linear_fp8_flops_fraction: float
    linear_sharpness: float  # p of the p-norm (mem^p + compute^p)^(1/p); large p -> max
    attn_prefill_flops_fraction: float
    attn_decode_bw_fraction: float
    # Bandwidth one (sequence, KV head) work unit reaches in the measured decode kernel, which does
    # not split the KV across thread blocks. vLLM's kernels do, so the step model ignores it.
    attn_decode_unit_bw_fraction: float
    elementwise_bw_fraction: float  # from the 1 GiB copy row
    graph_kernel_gap_s: float = 3e-6
    step_overhead_s: float = 3e-4
    allreduce_bw_fraction: float = 0.7

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise BadInputError(f"coefficient {f.name} must be a number, got {value!r}")
            if not math.isfinite(value) or value < 0:
                raise BadInputError(f"coefficient {f.name} must be finite and >= 0, got {value!r}")
            if f.name.endswith("_fraction") and value == 0:
                raise BadInputError(f"coefficient {f.name} must be positive")

    def linear_bw_fraction(self, precision: Precision) -> float:
        if precision is Precision.BF16:
            return self.linear_bf16_bw_fraction
        return self.linear_fp8_bw_fraction

    def linear_flops_fraction(self, precision: Precision) -> float:
        if precision is Precision.BF16:
            return self.linear_bf16_flops_fraction
        return self.linear_fp8_flops_fraction


ASSUMED_COEFFICIENTS = ("graph_kernel_gap_s", "step_overhead_s", "allreduce_bw_fraction")


def coefficients_to_json(
    coefficients: StepTimeCoefficients,
    calibrated_on: str = "",
    fit: Mapping[str, Mapping[str, float]] | None = None,
    assumed: tuple[str, ...] = ASSUMED_COEFFICIENTS,
) -> str:
    """The coefficients file: values, what they were fitted on, and the fit's errors."""
    doc: dict[str, Any] = {
        "format": COEFFICIENTS_FORMAT,
        "calibrated_on": calibrated_on,
        "coefficients": asdict(coefficients),
        "assumed": list(assumed),
    }
    if fit is not None:
        doc["fit"] = {k: dict(v) for k, v in fit.items()}
    return json.dumps(doc, indent=2) + "\n"


def coefficients_from_json(text: str, where: str = "coefficients") -> StepTimeCoefficients:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadInputError(f"{where} is not valid JSON (line {exc.lineno})") from None
    if not isinstance(doc, dict) or doc.get("format") != COEFFICIENTS_FORMAT:
        raise BadInputError(
            f"{where}: expected a coefficients file of format {COEFFICIENTS_FORMAT}"
        )
    values = doc.get("coefficients")
    if not isinstance(values, dict):
        raise BadInputError(f"{where}: missing the 'coefficients' mapping")
    names = {f.name for f in fields(StepTimeCoefficients)}
    unknown = sorted(set(values) - names)
    if unknown:
        raise BadInputError(f"{where}: unknown coefficient(s) {', '.join(unknown)}")
    missing = [
        f.name
        for f in fields(StepTimeCoefficients)
        if f.default is MISSING and f.name not in values
    ]
    if missing:
        raise BadInputError(f"{where}: missing coefficient(s) {', '.join(missing)}")
    try:
        return StepTimeCoefficients(**values)
    except BadInputError as exc:
        raise BadInputError(f"{where}: {exc}") from None


def load_coefficients(path: str | Path | None = None) -> StepTimeCoefficients:
    """Read a coefficients JSON (the shipped H200 fit when ``path`` is None)."""
    if path is None:
        return default_coefficients()
    try:
        text = Path(path).read_text("utf-8")
    except OSError as exc:
        raise BadInputError(f"coefficients file {path}: {exc.strerror or exc}") from None
    return coefficients_from_json(text, f"coefficients file {path}")


def save_coefficients(
    coefficients: StepTimeCoefficients,
    path: str | Path,
    calibrated_on: str = "",
    fit: Mapping[str, Mapping[str, float]] | None = None,
) -> None:
    Path(path).write_text(coefficients_to_json(coefficients, calibrated_on, fit), "utf-8")


@functools.cache
def default_coefficients() -> StepTimeCoefficients:
    """The shipped fit (models/data/steptime_coefficients.json), read on first use."""
    text = resources.files("models").joinpath("data", "steptime_coefficients.json").read_text()
    return coefficients_from_json(text, "models/data/steptime_coefficients.json")


# --- operator terms, shared with the calibration so both use one formula ----------------------


def roofline(memory_s: Any, compute_s: Any, sharpness: float) -> Any:
    """Smooth maximum (p-norm) of a memory and a compute time; arrays or floats, both >= 0."""
    top = np.maximum(memory_s, compute_s)
    safe = np.where(top > 0, top, 1.0)
    return top * ((memory_s / safe) ** sharpness + (compute_s / safe) ** sharpness) ** (
        1.0 / sharpness
    )


def linear_bytes(tokens: Any, k: float, n: float, precision: Precision) -> Any:
    """Weights (K×N) + input (T×K, fp8 when the GEMM is fp8) + bf16 output (T×N)."""
    b = precision.bytes_per_element
    return k * n * b + tokens * k * b + tokens * n * 2


def linear_gpu_time(
    tokens: Any,
    k: float,
    n: float,
    precision: Precision,
    gpu: GpuSpec,
    coefficients: StepTimeCoefficients,
) -> Any:
    """GPU time of x[T,K]·W[K,N], launch excluded."""
    memory = linear_bytes(tokens, k, n, precision) / (
        gpu.memory_bandwidth * coefficients.linear_bw_fraction(precision)
    )
    compute = (
        (2.0 * k * n)
        * tokens
        / (gpu.peak_flops(precision) * coefficients.linear_flops_fraction(precision))
    )
    return roofline(memory, compute, coefficients.linear_sharpness)


def attention_flops_per_pair(num_q_heads: int, head_dim: int) -> int:
    """QKᵀ and AV for one (query, key) pair, one layer."""
    return 4 * num_q_heads * head_dim


def layer_linear_shapes(config: ModelConfig, tp: int) -> tuple[tuple[int, int], ...]:
    """(K, N) per GPU of qkv, o, gate_up and down (column- then row-parallel under TP)."""
    h, d = config.hidden_size, config.head_dim
    kv_heads = max(1, config.num_kv_heads // tp)
    return (
        (h, (config.num_q_heads // tp + 2 * kv_heads) * d),
        (config.num_q_heads // tp * d, h),
        (h, 2 * config.ffn_size // tp),
        (config.ffn_size // tp, h),
    )


def elementwise_bytes_per_token(profile: ModelProfile) -> float:
    """Activation bytes one token moves per layer outside the GEMMs and attention, per GPU:
    two fused residual+RMSNorm (read x and residual, write both), rotary on q and k, the
    KV-cache write, and SiLU·mul over the gate/up output. bf16 activations."""
    c, tp = profile.config, profile.tp
    kv_heads = profile.kv_heads_per_gpu
    norms = 2 * 4 * c.hidden_size * 2
    rotary = 2 * (c.num_q_heads // tp + kv_heads) * c.head_dim * 2
    kv_write = 2 * kv_heads * c.head_dim * (2 + profile.kv_dtype.bytes_per_element)
    silu = 3 * (c.ffn_size // tp) * 2
    return float(norms + rotary + kv_write + silu)


class ExecutionMode(StrEnum):
    """How vLLM runs a step: one CUDA graph, graphs with eager attention, or all eager."""

    FULL_GRAPH = "full CUDA graph"
    PIECEWISE_GRAPH = "piecewise CUDA graph"
    EAGER = "eager"


@dataclass(frozen=True, slots=True)
class StepTimeBreakdown:
    """One step's predicted time by term (seconds). total = fixed + max(GPU work, CPU launch)."""

    mode: ExecutionMode
    linear_s: float
    decode_attention_s: float
    prefill_attention_s: float
    lm_head_s: float
    elementwise_s: float
    allreduce_s: float
    kernel_gaps_s: float
    num_kernels: int
    cpu_launch_s: float
    fixed_s: float

    @property
    def gpu_s(self) -> float:
        return (
            self.linear_s
            + self.decode_attention_s
            + self.prefill_attention_s
            + self.lm_head_s
            + self.elementwise_s
            + self.allreduce_s
            + self.kernel_gaps_s
        )

    @property
    def cpu_bound(self) -> bool:
        return self.cpu_launch_s > self.gpu_s

    @property
    def total_s(self) -> float:
        return self.fixed_s + max(self.gpu_s, self.cpu_launch_s)


class RooflinePredictor:
    """ExecutionTimePredictor for one replica (``profile.tp`` GPUs of one kind).

    Build with :func:`build_predictor` from names, or directly from a ModelProfile and GpuSpec.
    ``cudagraph_max_tokens`` is vLLM's largest captured batch (0 = ``--enforce-eager``);
    ``table_tokens`` bounds the precomputed tables (larger steps are computed, just slower).
    """

    __slots__ = (
        "_cpu_decode",
        "_cpu_eager",
        "_cpu_mixed",
        "_ctx_s",
        "_fixed",
        "_graph_tokens",
        "_lm",
        "_n",
        "_pair_s",
        "_tok",
        "coefficients",
        "cudagraph_max_tokens",
        "gpu",
        "profile",
    )

    def __init__(
        self,
        profile: ModelProfile,
        gpu: GpuSpec,
        coefficients: StepTimeCoefficients | None = None,
        cudagraph_max_tokens: int = DEFAULT_CUDAGRAPH_MAX_TOKENS,
        table_tokens: int = DEFAULT_TABLE_TOKENS,
    ) -> None:
        gpu.require(profile.weight_dtype, "weights")
        gpu.require(profile.kv_dtype, "KV cache")
        if cudagraph_max_tokens < 0 or table_tokens < 1:
            raise BadInputError("cudagraph_max_tokens must be >= 0 and table_tokens >= 1")
        self.profile = profile
        self.gpu = gpu
        self.coefficients = coefficients if coefficients is not None else default_coefficients()
        self.cudagraph_max_tokens = cudagraph_max_tokens
        coef = self.coefficients
        c, tp = profile.config, profile.tp
        layers = c.num_layers

        self._n = table_tokens + 1
        counts = np.arange(self._n, dtype=np.float64)
        self._tok = self._token_total(counts).tolist()
        self._lm = self._lm_total(counts).tolist()

        # Decode attention per context token (all layers): KV bytes at the achieved bandwidth, or
        # its FLOPs if that were ever slower. vLLM's decode kernels split long contexts across
        # thread blocks, so the measured kernel's per-sequence parallelism limit is not applied.
        q_heads = c.num_q_heads // tp
        kv_per_layer = profile.kv_bytes_per_token_per_gpu / layers
        flops_pair = attention_flops_per_pair(q_heads, c.head_dim)
        self._ctx_s = layers * max(
            kv_per_layer / (gpu.memory_bandwidth * coef.attn_decode_bw_fraction),
            flops_pair / (gpu.bf16_flops * coef.attn_prefill_flops_fraction),
        )
        # Prefill attention per (query, key) pair, all layers; bf16 flash attention.
        self._pair_s = layers * flops_pair / (gpu.bf16_flops * coef.attn_prefill_flops_fraction)

        # CPU launch time of the kernels launched outside CUDA graphs.
        other_kernels = KERNELS_PER_LAYER - 1 + (2 if tp > 1 else 0)
        self._cpu_decode = 0.0
        self._cpu_mixed = layers * coef.attn_prefill_launch_s + (layers + 1) * coef.linear_launch_s
        self._cpu_eager = (
            layers * (coef.attn_prefill_launch_s + other_kernels * coef.linear_launch_s)
            + KERNELS_PER_STEP * coef.linear_launch_s
        )
        self._graph_tokens = cudagraph_max_tokens
        self._fixed = coef.step_overhead_s

    # --- tables (vectorized over token counts) ---

    @property
    def num_kernels(self) -> int:
        per_layer = KERNELS_PER_LAYER + (2 if self.profile.tp > 1 else 0)
        return self.profile.config.num_layers * per_layer + KERNELS_PER_STEP

    def _token_terms(self, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(linear layers, elementwise, all-reduce) seconds for T tokens, all layers."""
        p, gpu, coef = self.profile, self.gpu, self.coefficients
        c = p.config
        linear = sum(
            linear_gpu_time(tokens, k, n, p.weight_dtype, gpu, coef)
            for k, n in layer_linear_shapes(c, p.tp)
        )
        linear = c.num_layers * np.where(tokens > 0, linear, 0.0)
        elementwise = (
            c.num_layers
            * elementwise_bytes_per_token(p)
            * tokens
            / (gpu.memory_bandwidth * coef.elementwise_bw_fraction)
        )
        allreduce = 2 * c.num_layers * self._allreduce_s(tokens * c.hidden_size * 2.0)
        return linear, elementwise, allreduce

    def _allreduce_s(self, nbytes: np.ndarray) -> np.ndarray:
        """One ring all-reduce of ``nbytes`` per GPU: latency + 2(TP−1)/TP of it over the link."""
        tp = self.profile.tp
        if tp == 1:
            return np.zeros_like(nbytes)
        link = (
            self.gpu.interconnect_bandwidth_per_direction * self.coefficients.allreduce_bw_fraction
        )
        moved = 2.0 * (tp - 1) / tp * nbytes / link
        return np.where(nbytes > 0, self.gpu.allreduce_latency_s + moved, 0.0)

    def _token_total(self, tokens: np.ndarray) -> np.ndarray:
        linear, elementwise, allreduce = self._token_terms(tokens)
        gaps = self.num_kernels * self.coefficients.graph_kernel_gap_s
        return np.where(tokens > 0, linear + elementwise + allreduce + gaps, 0.0)

    def _lm_terms(self, seqs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(LM head GEMM, sampling + logits gather) seconds for ``seqs`` sampled rows."""
        p, gpu, coef = self.profile, self.gpu, self.coefficients
        c = p.config
        head = linear_gpu_time(seqs, c.hidden_size, c.vocab_size / p.tp, p.weight_dtype, gpu, coef)
        head = np.where(seqs > 0, head, 0.0)
        sampling = (
            seqs
            * c.vocab_size
            * SAMPLING_BYTES_PER_VOCAB_ENTRY
            / (gpu.memory_bandwidth * coef.elementwise_bw_fraction)
        )
        # Vocab-parallel LM head: the bf16 logit shards are gathered (half a ring all-reduce).
        gather = 0.5 * self._allreduce_s(seqs * c.vocab_size * 2.0)
        return head, sampling + gather

    def _lm_total(self, seqs: np.ndarray) -> np.ndarray:
        head, rest = self._lm_terms(seqs)
        return head + rest

    def _tok_at(self, tokens: int) -> float:
        return float(self._token_total(np.array([tokens], dtype=np.float64))[0])

    def _lm_at(self, seqs: int) -> float:
        return float(self._lm_total(np.array([seqs], dtype=np.float64))[0])

    # --- the interface ---

    def step_time_s(self, shape: StepShape) -> float:
        """Seconds for one engine step. Hot path: no allocation, no dict lookups."""
        nd = shape.num_decode
        pt = shape.prefill_tokens
        t = nd + pt
        if t <= 0:
            return 0.0
        g = self._tok[t] if t < self._n else self._tok_at(t)
        nl = nd + shape.num_prefill_seqs
        g += self._lm[nl] if nl < self._n else self._lm_at(nl)
        if pt:
            g += shape.prefill_attention * self._pair_s
            c = self._cpu_mixed if t <= self._graph_tokens else self._cpu_eager
        else:
            c = self._cpu_decode if t <= self._graph_tokens else self._cpu_eager
        g += shape.decode_context_sum * self._ctx_s
        return self._fixed + (g if g > c else c)

    def decode_steps_time_s(self, shape: StepShape, steps: int) -> float:
        """Exact sum of ``steps`` pure-decode steps, context growing by num_decode each step,
        in O(1): step i costs fixed + max(A + (S0 + i·B)·k, C), a linear term against a constant."""
        if steps <= 0:
            return 0.0
        if shape.prefill_tokens:
            raise ValueError("decode_steps_time_s needs a pure-decode shape (prefill_tokens == 0)")
        nd = shape.num_decode
        if nd <= 0:
            return 0.0
        nl = nd + shape.num_prefill_seqs
        base = (self._tok[nd] if nd < self._n else self._tok_at(nd)) + (
            self._lm[nl] if nl < self._n else self._lm_at(nl)
        )
        cpu = self._cpu_decode if nd <= self._graph_tokens else self._cpu_eager
        k = self._ctx_s
        s0 = shape.decode_context_sum
        first = base + s0 * k
        slope = nd * k
        # Steps 0..m-1 are CPU-launch bound (GPU work <= cpu), the rest GPU bound.
        if first >= cpu:
            m = 0
        elif slope <= 0:
            m = steps
        else:
            m = min(steps, math.floor((cpu - first) / slope) + 1)
        gpu_steps = steps - m
        index_sum = (steps - 1) * steps / 2 - (m - 1) * m / 2  # Σ i for i in [m, steps)
        gpu = gpu_steps * first + slope * index_sum
        return steps * self._fixed + m * cpu + gpu

    # --- explanations and capacity ---

    def mode(self, shape: StepShape) -> ExecutionMode:
        tokens = shape.num_tokens
        if tokens > self.cudagraph_max_tokens:
            return ExecutionMode.EAGER
        return ExecutionMode.PIECEWISE_GRAPH if shape.prefill_tokens else ExecutionMode.FULL_GRAPH

    def breakdown(self, shape: StepShape) -> StepTimeBreakdown:
        """The same prediction as step_time_s, term by term (slow; for reports and the CLI)."""
        mode = self.mode(shape)
        coef = self.coefficients
        t = np.array([shape.num_tokens], dtype=np.float64)
        seqs = np.array([shape.num_decode + shape.num_prefill_seqs], dtype=np.float64)
        linear, elementwise, allreduce = (float(x[0]) for x in self._token_terms(t))
        head, sampling = (float(x[0]) for x in self._lm_terms(seqs))
        cpu = {
            ExecutionMode.FULL_GRAPH: self._cpu_decode,
            ExecutionMode.PIECEWISE_GRAPH: self._cpu_mixed,
            ExecutionMode.EAGER: self._cpu_eager,
        }[mode]
        busy = shape.num_tokens > 0
        return StepTimeBreakdown(
            mode=mode,
            linear_s=linear,
            decode_attention_s=shape.decode_context_sum * self._ctx_s,
            prefill_attention_s=shape.prefill_attention * self._pair_s,
            lm_head_s=head + sampling,
            elementwise_s=elementwise,
            allreduce_s=allreduce,
            kernel_gaps_s=self.num_kernels * coef.graph_kernel_gap_s if busy else 0.0,
            num_kernels=self.num_kernels if busy else 0,
            cpu_launch_s=cpu if busy else 0.0,
            fixed_s=self._fixed if busy else 0.0,
        )

    @property
    def weight_read_floor_s(self) -> float:
        """All weights over peak HBM bandwidth: capacity-formulas.md §3.4's minimum decode step."""
        return self.profile.weight_bytes_per_gpu / self.gpu.memory_bandwidth

    def kv_capacity(
        self,
        gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION,
        block_size: int = DEFAULT_BLOCK_SIZE,
        overhead_bytes: float = DEFAULT_OVERHEAD_BYTES,
    ) -> KvCapacity:
        return kv_cache_capacity(
            self.profile, self.gpu, gpu_memory_utilization, block_size, overhead_bytes
        )

    def num_gpu_blocks(
        self,
        gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION,
        block_size: int = DEFAULT_BLOCK_SIZE,
        overhead_bytes: float = DEFAULT_OVERHEAD_BYTES,
    ) -> int:
        return self.kv_capacity(gpu_memory_utilization, block_size, overhead_bytes).num_gpu_blocks


def build_predictor(
    model: str | ModelConfig,
    gpu: str | GpuSpec,
    dtype: str | Precision = Precision.BF16,
    tp: int = 1,
    kv_dtype: str | Precision | None = None,
    coefficients: StepTimeCoefficients | None = None,
    cudagraph_max_tokens: int = DEFAULT_CUDAGRAPH_MAX_TOKENS,
) -> RooflinePredictor:
    """A predictor from friendly names: ``build_predictor("llama-3.1-8b", "h200", "bf16", 1)``."""
    return RooflinePredictor(
        make_profile(model, dtype, tp, kv_dtype),
        get_gpu(gpu),
        coefficients,
        cudagraph_max_tokens,
    )


# --- CLI helper ------------------------------------------------------------------------------


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:8.3f} ms"


def steptime_command(
    model: str,
    gpu: str,
    dtype: str,
    batch: int,
    context: int,
    prefill_tokens: int = 0,
    tp: int = 1,
    kv_dtype: str | None = None,
) -> str:
    """Text for ``inferledger steptime``: one step of ``batch`` decode sequences at ``context``
    tokens each, plus one new prompt chunk of ``prefill_tokens`` tokens, with its breakdown."""
    for name, value, low in (
        ("batch", batch, 0),
        ("context", context, 0),
        ("prefill tokens", prefill_tokens, 0),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise BadInputError(f"{name} must be an integer >= {low}, got {value!r}")
    if batch == 0 and prefill_tokens == 0:
        raise BadInputError("nothing to compute: give a batch > 0 or prefill tokens > 0")
    predictor = build_predictor(model, gpu, parse_precision(dtype), tp, kv_dtype)
    cap = predictor.kv_capacity()  # a deployment whose weights do not fit has no step time
    shape = StepShape(
        num_decode=batch,
        decode_context_sum=batch * context,
        prefill_tokens=prefill_tokens,
        prefill_attention=prefill_tokens * prefill_tokens / 2.0,
        num_prefill_seqs=1 if prefill_tokens else 0,
    )
    b = predictor.breakdown(shape)
    total = predictor.step_time_s(shape)
    p, g = predictor.profile, predictor.gpu
    lines = [
        f"{p.describe()} on {p.tp}× {g.name}",
        f"step: {batch} decode sequence(s) at context {context:,}"
        + (f" + {prefill_tokens:,} prefill tokens (one new prompt)" if prefill_tokens else "")
        + f"; {b.mode}",
        f"predicted engine step time: {total * 1e3:.3f} ms",
        f"  linear layers (weights + FLOPs)   {_ms(b.linear_s)}",
        f"  decode attention (KV reads)       {_ms(b.decode_attention_s)}",
        f"  prefill attention                 {_ms(b.prefill_attention_s)}",
        f"  LM head + sampling                {_ms(b.lm_head_s)}",
        f"  norms, rotary, activation, KV     {_ms(b.elementwise_s)}",
        f"  tensor-parallel all-reduce        {_ms(b.allreduce_s)}",
        f"  kernel gaps ({b.num_kernels} kernels)         {_ms(b.kernel_gaps_s)}",
        f"  = GPU work                        {_ms(b.gpu_s)}",
        f"  CPU kernel launches               {_ms(b.cpu_launch_s)}"
        + ("  <- binds (eager launch slower than the GPU)" if b.cpu_bound else ""),
        f"  + fixed per-step overhead         {_ms(b.fixed_s)}",
        f"floor (all weights / peak HBM bandwidth): {predictor.weight_read_floor_s * 1e3:.3f} ms",
    ]
    needed = batch * (context + 1) + prefill_tokens
    lines.append(
        f"KV cache: {cap.num_gpu_blocks:,} blocks = {cap.tokens:,} tokens "
        f"(gpu_memory_utilization {DEFAULT_GPU_MEMORY_UTILIZATION:g}); this step needs "
        f"{needed:,}" + ("  <- does not fit" if needed > cap.tokens else "")
    )
    return "\n".join(lines)
