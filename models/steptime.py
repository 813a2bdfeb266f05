"""Roofline step-time model of one vLLM V1 replica, calibrated on operator and whole-step timings.

A step is two things that run side by side: the **GPU forward pass** and the **engine's CPU work**.

The forward pass is a sum of operator terms, each ``max``-like in a memory time (bytes over an
achieved fraction of HBM bandwidth) and a compute time (FLOPs over an achieved fraction of dense
peak): the matmul weights read once per step and the linear-layer FLOPs of every token; decode
attention reading the KV cache; prefill attention FLOPs; the LM head with sampling; norms, rotary,
activation and KV writes; the tensor-parallel all-reduces; and a gap per kernel. Outside CUDA
graphs the CPU launches every kernel while the GPU runs them, and the forward pass costs a smooth
maximum of the two (the CPU runs ahead of long kernels and falls behind on short ones).

The engine's CPU work per step (scheduler, input preparation, output processing) runs beside the
forward pass when vLLM's async scheduling is on (the default since vLLM 0.14) and before it when
off; a small synchronisation remains on the critical path either way.

The single-operator roofline formulas live in models.operator_roofline and the coefficients (and
their file) in models.step_coefficients. Operator fractions are fitted by models.calibration on
shared/reference/h200-llama-ops.csv; the in-step efficiencies, kernel gap and launch terms by
models.step_calibration on whole-model steps (shared/reference/h200-llama-steps.csv); both
copies ship in models/data/ and the result in models/data/steptime_coefficients.json. The engine
CPU terms are documented assumptions (whole vLLM steps refit the synchronisation). The fractions
are the H200's; other GPUs get them through their ladder in models/data/gpus.yaml (published
achieved-vs-peak ratios, else the spec sheet), the tensor-parallel all-reduce from published
tables (models.allreduce) and an fp8 KV cache its dequantisation cost (models.steptime_terms).
docs/simulator-calibration.md explains each term.

Speed: the simulator prices about a million steps per simulated hour, so everything that depends
only on the token count is tabulated at construction and ``step_time_s`` is a few list lookups and
multiplications (about 1 µs in CPython; bench/steptime_error.py measures it).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, fields
from enum import StrEnum
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
from models.operator_roofline import (
    attention_flops_per_pair,
    elementwise_bytes_per_token,
    harness_elementwise_bytes_per_token,
    layer_linear_shapes,
    linear_gpu_time,
    smooth_max,
)
from models.step_coefficients import StepTimeCoefficients, default_coefficients
from models.steptime_terms import (
    fp8_kv_dequant_s_per_element,
    ladder_coefficients,
    provenance_line,
    step_provenance,
)

# Kernels per layer in a vLLM forward pass after torch.compile fusion: 2 fused residual+RMSNorm,
# qkv, rotary, KV-cache write, attention, o, gate_up, SiLU·mul, down (+2 all-reduces at TP > 1);
# per step: embedding, final norm, LM head, logits gather and two sampler kernels.
KERNELS_PER_LAYER = 10
KERNELS_PER_STEP = 6
# The reference harness of h200-llama-steps.csv (its README): RMSNorm, qkv, SDPA, o, residual
# add, RMSNorm, gate_up, SiLU, mul, down, residual add per layer; embedding, final norm and the
# LM head per step. No rotary, KV write, sampling or engine work.
HARNESS_KERNELS_PER_LAYER = 11
HARNESS_KERNELS_PER_STEP = 3
# Bytes of fp32 logits each sampled sequence moves: write, softmax read+write, sample read.
SAMPLING_BYTES_PER_VOCAB_ENTRY = 16
# vLLM V1 captures CUDA graphs for batches up to 512 tokens by default.
DEFAULT_CUDAGRAPH_MAX_TOKENS = 512
DEFAULT_TABLE_TOKENS = 16384


class StepScope(StrEnum):
    """What a predicted step contains: a vLLM engine step, or the forward pass alone as the
    reference harness of h200-llama-steps.csv measured it (no rotary, KV write, sampling or
    engine CPU; unfused norms and activation). Calibration predicts the harness; the product
    predicts vLLM."""

    VLLM = "vllm"
    HARNESS = "harness"


class ExecutionMode(StrEnum):
    """How vLLM runs a step: one CUDA graph, graphs with eager attention, or all eager."""

    FULL_GRAPH = "full CUDA graph"
    PIECEWISE_GRAPH = "piecewise CUDA graph"
    EAGER = "eager"


@dataclass(frozen=True, slots=True)
class StepTimeBreakdown:
    """One step's predicted time by term (seconds).

    forward (``gpu_s``) = smooth max(GPU work, CPU launch time), or the GPU work alone in a full
    CUDA graph; the step (``total_s``) adds the engine's CPU time that the forward pass does not
    hide (``engine_s``)."""

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
    engine_cpu_s: float  # the engine's CPU work this step, hidden or not
    engine_s: float  # the part of it on the critical path
    launch_sharpness: float
    async_scheduling: bool

    @property
    def gpu_work_s(self) -> float:
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
    def gpu_s(self) -> float:
        """The forward pass: what a CUDA-graph replay or an eager forward takes."""
        if self.cpu_launch_s <= 0.0:
            return self.gpu_work_s
        return smooth_max(self.gpu_work_s, self.cpu_launch_s, self.launch_sharpness)

    @property
    def launch_exposed_s(self) -> float:
        """What eager kernel launches add to the GPU work."""
        return self.gpu_s - self.gpu_work_s

    @property
    def cpu_bound(self) -> bool:
        return self.cpu_launch_s > self.gpu_work_s

    @property
    def total_s(self) -> float:
        return self.gpu_s + self.engine_s


class RooflinePredictor:
    """ExecutionTimePredictor for one replica (``profile.tp`` GPUs of one kind).

    Build with :func:`build_predictor` from names, or directly from a ModelProfile and GpuSpec.
    ``cudagraph_max_tokens`` is vLLM's largest captured batch (0 = ``--enforce-eager``);
    ``async_scheduling`` overlaps the engine's CPU work with the forward pass (vLLM's default
    since 0.14; off for older engines or ``--no-async-scheduling``); ``scope`` HARNESS predicts
    the forward pass alone as the reference harness measured it (calibration only);
    ``table_tokens`` bounds the precomputed tables (larger steps are computed, just slower).
    Without ``coefficients`` the shipped H200 fit is carried to ``gpu`` by its ladder
    (``ladder_applied``); given coefficients are used as they are (a calibration's own GPU).
    """

    __slots__ = (
        "_async",
        "_cpu_decode",
        "_cpu_eager",
        "_cpu_mixed",
        "_ctx_s",
        "_engine_seq",
        "_engine_step",
        "_graph_tokens",
        "_lm",
        "_n",
        "_pair_s",
        "_q",
        "_sync",
        "_tok",
        "allreduce",
        "async_scheduling",
        "coefficients",
        "cudagraph_max_tokens",
        "gpu",
        "ladder_applied",
        "profile",
        "scope",
    )

    def __init__(
        self,
        profile: ModelProfile,
        gpu: GpuSpec,
        coefficients: StepTimeCoefficients | None = None,
        cudagraph_max_tokens: int = DEFAULT_CUDAGRAPH_MAX_TOKENS,
        table_tokens: int = DEFAULT_TABLE_TOKENS,
        *,
        async_scheduling: bool = True,
        scope: StepScope = StepScope.VLLM,
    ) -> None:
        gpu.require(profile.weight_dtype, "weights")
        gpu.require(profile.kv_dtype, "KV cache")
        if cudagraph_max_tokens < 0 or table_tokens < 1:
            raise BadInputError("cudagraph_max_tokens must be >= 0 and table_tokens >= 1")
        self.profile = profile
        self.gpu = gpu
        self.ladder_applied = coefficients is None
        self.coefficients = (
            ladder_coefficients(default_coefficients(), gpu)
            if coefficients is None
            else coefficients
        )
        self.allreduce = gpu.allreduce_model()
        self.cudagraph_max_tokens = cudagraph_max_tokens
        self.async_scheduling = async_scheduling
        self.scope = StepScope(scope)
        coef = self.coefficients
        c, tp = profile.config, profile.tp
        layers = c.num_layers

        self._n = table_tokens + 1
        counts = np.arange(self._n, dtype=np.float64)
        self._tok = self._token_total(counts).tolist()
        self._lm = self._lm_total(counts).tolist()

        # Decode attention per context token (all layers): KV bytes at the achieved bandwidth, or
        # its FLOPs if that were ever slower. vLLM's decode kernels split long contexts across
        # thread blocks, so the measured kernel's per-sequence parallelism limit is not applied
        # (and the whole steps, fitted without it, agree: docs/simulator-calibration.md).
        q_heads = c.num_q_heads // tp
        kv_per_layer = profile.kv_bytes_per_token_per_gpu / layers
        flops_pair = attention_flops_per_pair(q_heads, c.head_dim)
        decode_bw = coef.attn_decode_bw_fraction * coef.step_attn_decode_bw_scale
        # An fp8 cache also pays its dequantisation per KV element (models.steptime_terms).
        dequant = fp8_kv_dequant_s_per_element(gpu, profile.kv_dtype)
        self._ctx_s = (
            layers
            * max(
                kv_per_layer / (gpu.memory_bandwidth * decode_bw),
                flops_pair / (gpu.bf16_flops * coef.attn_prefill_flops_fraction),
            )
            + dequant * profile.kv_bytes_per_token_per_gpu / profile.kv_dtype.bytes_per_element
        )
        # Prefill attention per (query, key) pair, all layers; bf16 flash attention.
        self._pair_s = layers * flops_pair / (gpu.bf16_flops * coef.attn_prefill_flops_fraction)

        # CPU launch time of the kernels launched outside CUDA graphs: every kernel when eager;
        # attention plus one launch per graph piece in a piecewise-graph (mixed) step.
        self._cpu_decode = 0.0
        self._cpu_mixed = (2 * layers + 1) * coef.step_launch_s
        self._cpu_eager = self.num_kernels * coef.step_launch_s
        self._q = coef.launch_sharpness
        self._graph_tokens = cudagraph_max_tokens
        vllm = self.scope is StepScope.VLLM
        self._engine_step = coef.engine_step_cpu_s if vllm else 0.0
        self._engine_seq = coef.engine_seq_cpu_s if vllm else 0.0
        self._sync = coef.engine_sync_s if vllm else 0.0
        self._async = async_scheduling or not vllm

    # --- tables (vectorized over token counts) ---

    @property
    def num_kernels(self) -> int:
        if self.scope is StepScope.HARNESS:
            layer, step = HARNESS_KERNELS_PER_LAYER, HARNESS_KERNELS_PER_STEP
        else:
            layer, step = KERNELS_PER_LAYER + (2 if self.profile.tp > 1 else 0), KERNELS_PER_STEP
        return self.profile.config.num_layers * layer + step

    def _token_terms(self, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(linear layers, elementwise, all-reduce) seconds for T tokens, all layers."""
        p, gpu, coef = self.profile, self.gpu, self.coefficients
        c = p.config
        scale = coef.step_linear_flops_scale
        linear = sum(
            linear_gpu_time(tokens, k, n, p.weight_dtype, gpu, coef, scale)
            for k, n in layer_linear_shapes(c, p.tp)
        )
        linear = c.num_layers * np.where(tokens > 0, linear, 0.0)
        per_token = (
            harness_elementwise_bytes_per_token(p)
            if self.scope is StepScope.HARNESS
            else elementwise_bytes_per_token(p)
        )
        elementwise = (
            c.num_layers
            * per_token
            * tokens
            / (gpu.memory_bandwidth * coef.elementwise_bw_fraction)
        )
        allreduce = 2 * c.num_layers * self._allreduce_s(tokens * c.hidden_size * 2.0)
        return linear, elementwise, allreduce

    def _allreduce_s(self, nbytes: np.ndarray) -> np.ndarray:
        """One all-reduce of ``nbytes`` per GPU: the interconnect's published latency table."""
        return self.allreduce.latency_s(nbytes, self.profile.tp)

    def _token_total(self, tokens: np.ndarray) -> np.ndarray:
        linear, elementwise, allreduce = self._token_terms(tokens)
        gaps = self.num_kernels * self.coefficients.graph_kernel_gap_s
        return np.where(tokens > 0, linear + elementwise + allreduce + gaps, 0.0)

    def _lm_terms(self, seqs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(LM head GEMM, sampling + logits gather) seconds for ``seqs`` sampled rows."""
        p, gpu, coef = self.profile, self.gpu, self.coefficients
        c = p.config
        head = linear_gpu_time(
            seqs,
            c.hidden_size,
            c.vocab_size / p.tp,
            p.weight_dtype,
            gpu,
            coef,
            coef.step_linear_flops_scale,
        )
        head = np.where(seqs > 0, head, 0.0)
        sampling = (
            0.0
            if self.scope is StepScope.HARNESS
            else seqs
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
        if c > 0.0:  # the forward pass: smooth max of GPU work and CPU launches
            q = self._q
            top = g if g > c else c
            f = top * ((g / top) ** q + (c / top) ** q) ** (1.0 / q)
        else:
            f = g
        e = self._engine_step + self._engine_seq * nl
        if self._async:  # engine CPU beside the forward pass, on the CPU after the launches
            w = c + e
            return (f if f > w else w) + self._sync
        return f + e + self._sync

    def decode_steps_time_s(self, shape: StepShape, steps: int) -> float:
        """Exact sum of ``steps`` pure-decode steps, context growing by num_decode each step.

        In a CUDA graph (no launches) step i costs max(A + (S0 + i·B)·k, E) + sync with async
        scheduling (A + (S0 + i·B)·k + E + sync without): a line against a constant, summed in
        O(1). Eager steps take a smooth maximum with the launch time: summed term by term in
        numpy until the smooth maximum equals the GPU work to the last bit, then in closed form.
        """
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
        first = base + shape.decode_context_sum * k
        slope = nd * k
        engine = self._engine_step + self._engine_seq * nl
        if cpu > 0.0:
            return self._eager_decode_sum(first, slope, cpu, engine, steps)
        if not self._async:
            return steps * (first + engine + self._sync) + slope * (steps - 1) * steps / 2
        # Steps 0..m-1 are bound by the engine's CPU (GPU work <= engine), the rest by the GPU.
        if first >= engine:
            m = 0
        elif slope <= 0:
            m = steps
        else:
            m = min(steps, math.floor((engine - first) / slope) + 1)
        gpu_steps = steps - m
        index_sum = (steps - 1) * steps / 2 - (m - 1) * m / 2  # Σ i for i in [m, steps)
        gpu = gpu_steps * first + slope * index_sum
        return steps * self._sync + m * engine + gpu

    def _eager_decode_sum(
        self, first: float, slope: float, cpu: float, engine: float, steps: int
    ) -> float:
        q = self._q
        floor = cpu + engine if self._async else 0.0
        extra = 0.0 if self._async else engine
        # Beyond GPU work of cpu·10^(17/q) (and the engine floor), (g^q + c^q)^(1/q) == g.
        exact_from = max(cpu * 10 ** (17.0 / q), floor)
        if slope > 0:
            numeric = min(steps, max(0, math.ceil((exact_from - first) / slope)))
        else:
            numeric = steps if first < exact_from else 0
        total = 0.0
        for start in range(0, numeric, 65536):
            i = np.arange(start, min(numeric, start + 65536), dtype=np.float64)
            g = first + slope * i
            top = np.maximum(g, cpu)
            f = top * ((g / top) ** q + (cpu / top) ** q) ** (1.0 / q)
            total += float(np.sum(np.maximum(f, floor)))
        rest = steps - numeric
        if rest:
            total += rest * first + slope * ((steps - 1) * steps / 2 - (numeric - 1) * numeric / 2)
        return total + steps * (self._sync + extra)

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
        nl = shape.num_decode + shape.num_prefill_seqs
        linear, elementwise, allreduce = (float(x[0]) for x in self._token_terms(t))
        head, sampling = (float(x[0]) for x in self._lm_terms(np.array([nl], dtype=np.float64)))
        cpu = {
            ExecutionMode.FULL_GRAPH: self._cpu_decode,
            ExecutionMode.PIECEWISE_GRAPH: self._cpu_mixed,
            ExecutionMode.EAGER: self._cpu_eager,
        }[mode]
        busy = shape.num_tokens > 0
        partial = StepTimeBreakdown(
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
            engine_cpu_s=self._engine_step + self._engine_seq * nl if busy else 0.0,
            engine_s=0.0,
            launch_sharpness=self._q,
            async_scheduling=self._async,
        )
        if not busy:
            return partial
        forward, e = partial.gpu_s, partial.engine_cpu_s
        if self._async:
            exposed = max(0.0, partial.cpu_launch_s + e - forward) + self._sync
        else:
            exposed = e + self._sync
        return StepTimeBreakdown(
            **{f.name: getattr(partial, f.name) for f in fields(StepTimeBreakdown)}
            | {"engine_s": exposed}
        )

    def provenance(self) -> dict[str, Any]:
        """Which of this replica's numbers are measured, published, extrapolated or assumed."""
        p = self.profile
        return step_provenance(self.gpu, p.tp, p.kv_dtype, self.ladder_applied)

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
    *,
    async_scheduling: bool = True,
) -> RooflinePredictor:
    """A predictor from friendly names: ``build_predictor("llama-3.1-8b", "h200", "bf16", 1)``."""
    return RooflinePredictor(
        make_profile(model, dtype, tp, kv_dtype),
        get_gpu(gpu),
        coefficients,
        cudagraph_max_tokens,
        async_scheduling=async_scheduling,
    )


def prefill_shape(
    tokens: int, seqs: int = 1, context_before: int = 0, decode: int = 0, decode_context: int = 0
) -> StepShape:
    """A step of ``decode`` sequences at ``decode_context`` tokens each plus ``tokens`` prompt
    tokens split as evenly as possible over ``seqs`` sequences (sizes differ by at most one),
    each after ``context_before`` cached tokens. Attention is per sequence: Σ s·(before + s/2)."""
    if tokens and not 1 <= seqs <= tokens:
        raise BadInputError(f"prefill sequences must be between 1 and {tokens:,}, got {seqs}")
    if not tokens:
        seqs = 0
    size, bigger = divmod(tokens, seqs) if seqs else (0, 0)
    pairs = bigger * (size + 1) * (context_before + (size + 1) / 2.0) + (seqs - bigger) * size * (
        context_before + size / 2.0
    )
    return StepShape(
        num_decode=decode,
        decode_context_sum=decode * decode_context,
        prefill_tokens=tokens,
        prefill_attention=pairs,
        num_prefill_seqs=seqs,
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
    prefill_seqs: int = 1,
    enforce_eager: bool = False,
    as_json: bool = False,
) -> str:
    """Text for ``inferledger steptime``: one step of ``batch`` decode sequences at ``context``
    tokens each, plus ``prefill_tokens`` new prompt tokens split evenly over ``prefill_seqs``
    prompts, with its breakdown (or one JSON object: ``ms``, ``gpu_ms``, ``engine_ms``, ...)."""
    for name, value, low in (
        ("batch", batch, 0),
        ("context", context, 0),
        ("prefill tokens", prefill_tokens, 0),
        ("prefill sequences", prefill_seqs, 1),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise BadInputError(f"{name} must be an integer >= {low}, got {value!r}")
    if batch == 0 and prefill_tokens == 0:
        raise BadInputError("nothing to compute: give a batch > 0 or prefill tokens > 0")
    if prefill_seqs > 1 and prefill_seqs > prefill_tokens:
        raise BadInputError(
            f"prefill sequences ({prefill_seqs}) must not exceed prefill tokens "
            f"({prefill_tokens}): each prompt needs at least one token"
        )
    predictor = build_predictor(
        model,
        gpu,
        parse_precision(dtype),
        tp,
        kv_dtype,
        cudagraph_max_tokens=0 if enforce_eager else DEFAULT_CUDAGRAPH_MAX_TOKENS,
    )
    cap = predictor.kv_capacity()  # a deployment whose weights do not fit has no step time
    shape = prefill_shape(prefill_tokens, prefill_seqs, 0, batch, context)
    b = predictor.breakdown(shape)
    total = predictor.step_time_s(shape)
    p, g = predictor.profile, predictor.gpu
    needed = batch * (context + 1) + prefill_tokens
    if as_json:
        doc = {
            "model": p.config.name,
            "gpu": g.name,
            "dtype": str(p.weight_dtype),
            "kv_cache_dtype": str(p.kv_dtype),
            "tensor_parallel_size": p.tp,
            "batch": batch,
            "context": context,
            "prefill_tokens": prefill_tokens,
            "prefill_seqs": shape.num_prefill_seqs,
            "enforce_eager": enforce_eager,
            "mode": str(b.mode),
            "ms": total * 1e3,
            "gpu_ms": b.gpu_s * 1e3,
            "engine_ms": b.engine_s * 1e3,
            "terms_ms": {
                "linear": b.linear_s * 1e3,
                "decode_attention": b.decode_attention_s * 1e3,
                "prefill_attention": b.prefill_attention_s * 1e3,
                "lm_head_sampling": b.lm_head_s * 1e3,
                "elementwise": b.elementwise_s * 1e3,
                "allreduce": b.allreduce_s * 1e3,
                "kernel_gaps": b.kernel_gaps_s * 1e3,
                "gpu_work": b.gpu_work_s * 1e3,
                "cpu_launch": b.cpu_launch_s * 1e3,
                "engine_cpu": b.engine_cpu_s * 1e3,
            },
            "num_kernels": b.num_kernels,
            "weight_floor_ms": predictor.weight_read_floor_s * 1e3,
            "kv_cache_tokens": cap.tokens,
            "kv_tokens_needed": needed,
            "provenance": predictor.provenance(),
        }
        return json.dumps(doc)
    prompts = shape.num_prefill_seqs
    lines = [
        f"{p.describe()} on {p.tp}× {g.name}",
        f"step: {batch} decode sequence(s) at context {context:,}"
        + (
            f" + {prefill_tokens:,} prefill tokens "
            + ("(one new prompt)" if prompts == 1 else f"({prompts} new prompts)")
            if prefill_tokens
            else ""
        )
        + f"; {b.mode}",
        f"predicted engine step time: {total * 1e3:.3f} ms "
        f"(forward pass {b.gpu_s * 1e3:.3f} ms + engine CPU on the critical path "
        f"{b.engine_s * 1e3:.3f} ms)",
        "GPU forward pass",
        f"  linear layers (weights + FLOPs)   {_ms(b.linear_s)}",
        f"  decode attention (KV reads)       {_ms(b.decode_attention_s)}",
        f"  prefill attention                 {_ms(b.prefill_attention_s)}",
        f"  LM head + sampling                {_ms(b.lm_head_s)}",
        f"  norms, rotary, activation, KV     {_ms(b.elementwise_s)}",
        f"  tensor-parallel all-reduce        {_ms(b.allreduce_s)}",
        f"  kernel gaps ({b.num_kernels} kernels)         {_ms(b.kernel_gaps_s)}",
        f"  = GPU work                        {_ms(b.gpu_work_s)}",
        f"  CPU kernel launches               {_ms(b.cpu_launch_s)}"
        + ("  <- binds (eager launch slower than the GPU)" if b.cpu_bound else ""),
        f"  = forward pass                    {_ms(b.gpu_s)}",
        "engine CPU (scheduler, input preparation, output processing)",
        f"  per step                          {_ms(b.engine_cpu_s)}"
        + ("  (beside the forward pass: async scheduling)" if b.async_scheduling else ""),
        f"  + on the critical path            {_ms(b.engine_s)}",
        f"floor (all weights / peak HBM bandwidth): {predictor.weight_read_floor_s * 1e3:.3f} ms",
        provenance_line(predictor.provenance()),
    ]
    lines.append(
        f"KV cache: {cap.num_gpu_blocks:,} blocks = {cap.tokens:,} tokens "
        f"(gpu_memory_utilization {DEFAULT_GPU_MEMORY_UTILIZATION:g}); this step needs "
        f"{needed:,}" + ("  <- does not fit" if needed > cap.tokens else "")
    )
    return "\n".join(lines)
