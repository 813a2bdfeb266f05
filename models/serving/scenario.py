"""A simulation scenario: the deployment (what `vllm serve` is told), the traffic (what
`vllm bench serve` sends, a mix of traffic classes, a fitted dataset such as ShareGPT, or a
replayed trace), and how the client measures it (client delay, warm-up / cool-down window), as
one frozen, typed config.

Every field is declared once in SCENARIO_FIELDS (name, kind, default, help); the YAML loader, the
`inferledger simulate` flags and the docs all read that table. A bad value is a BadInputError
whose one line names the field. models/serving/scenario_run.py turns a scenario into a
simulation result (run_scenario); the resolved engine (KV blocks, scheduler limits) is returned
beside it so every number traces to its inputs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from inferledger.core.errors import BadInputError
from inferledger.core.yaml_files import read_yaml_file
from models.gpu_catalog import Precision
from models.serving.config import (
    ADMISSION_POLICIES,
    RouterPolicy,
)
from models.serving.engine_era import ENGINES, USAGE_CONTEXTS
from models.workload.datasets import DATASET_NAMES

GIB = 1 << 30
# vLLM's OpenAI server picks larger scheduler limits on big GPUs (reference §3; arg_utils).
LARGE_GPU_MIN_GIB = 70
# vLLM derives max_model_len from the model's config (max_position_embeddings); the catalog has
# no such field yet, and every model in it is a Llama-3.1 with a 128 Ki context.
DEFAULT_MAX_MODEL_LEN = 131072
KV_CACHE_DTYPES = {
    "auto": None,
    "bfloat16": Precision.BF16,
    "fp8": Precision.FP8,
    "fp8_e4m3": Precision.FP8,
    "fp8_e5m2": Precision.FP8,
}


@dataclass(frozen=True, slots=True)
class FieldSpec:
    """One scenario field: its kind decides parsing (int, float, rate, bool, str, choice)."""

    name: str
    kind: str
    default: Any
    help: str
    minimum: float | None = None
    choices: tuple[str, ...] = ()
    optional: bool = False  # None allowed
    shown_default: str | None = None  # how --help shows a None default


SCENARIO_FIELDS: tuple[FieldSpec, ...] = (
    # the deployment (`vllm serve`)
    FieldSpec(
        "model",
        "str",
        None,
        "model name or alias, e.g. llama-3.1-8b",
        optional=True,
        shown_default="required",
    ),
    FieldSpec(
        "gpu",
        "str",
        None,
        "GPU: A100-80GB, H100, H200, L40S, B200",
        optional=True,
        shown_default="required",
    ),
    FieldSpec("dtype", "str", "auto", "weights: auto (bf16), bf16 or fp8"),
    FieldSpec(
        "kv_cache_dtype",
        "choice",
        "auto",
        "KV cache: auto (as the weights compute, bf16), bfloat16, fp8, fp8_e4m3, fp8_e5m2",
        choices=tuple(KV_CACHE_DTYPES),
    ),
    FieldSpec("tensor_parallel_size", "int", 1, "GPUs per replica", minimum=1),
    FieldSpec("replicas", "int", 1, "replicas behind the router", minimum=1),
    FieldSpec(
        "router",
        "choice",
        "round_robin",
        "how the router picks a replica",
        choices=tuple(p.value for p in RouterPolicy),
    ),
    FieldSpec(
        "max_num_seqs",
        "int",
        None,
        "running requests per replica (vLLM: 1024 on GPUs >= 70 GiB but A100, else 256)",
        minimum=1,
        optional=True,
        shown_default="vLLM's choice",
    ),
    FieldSpec(
        "max_num_batched_tokens",
        "int",
        None,
        "token budget per step (vLLM: 8192 on GPUs >= 70 GiB but A100, else 2048)",
        minimum=1,
        optional=True,
        shown_default="vLLM's choice",
    ),
    FieldSpec(
        "max_model_len",
        "int",
        None,
        "longest prompt + output",
        minimum=2,
        optional=True,
        shown_default=str(DEFAULT_MAX_MODEL_LEN),
    ),
    FieldSpec(
        "admission",
        "choice",
        "vllm",
        "vllm (admit on the prompt's blocks; a full KV cache preempts and recomputes) or reserve "
        "(admit only when the whole sequence's blocks are free: never preempts)",
        choices=ADMISSION_POLICIES,
    ),
    FieldSpec(
        "num_scheduler_steps",
        "int",
        1,
        "decode steps per scheduling pass (vLLM V0's --num-scheduler-steps, multi-step "
        "scheduling): admits only between passes, streams tokens in bursts; 1 = every step",
        minimum=1,
    ),
    FieldSpec(
        "engine",
        "choice",
        "v1",
        "vLLM engine: v1, or v0 (the engine's CPU work per step serial with the forward "
        "pass, its size fitted on vLLM 0.6.0 runs; docs/simulator.md, Older engines)",
        choices=ENGINES,
    ),
    FieldSpec(
        "enable_chunked_prefill",
        "bool",
        True,
        "chunked prefill; off (engine v0 only) = V0's scheduler: steps of whole prompts alone, "
        "decoders paused meanwhile",
    ),
    FieldSpec(
        "usage_context",
        "choice",
        "api_server",
        "whose scheduler defaults: api_server (`vllm serve`) or llm_class (the offline LLM "
        "class of `vllm bench latency/throughput`: 16384 batched tokens on GPUs >= 70 GiB but "
        "A100, else 8192)",
        choices=USAGE_CONTEXTS,
    ),
    FieldSpec("gpu_memory_utilization", "float", 0.9, "fraction of GPU memory vLLM takes"),
    FieldSpec("block_size", "int", 16, "KV-cache block, in tokens", minimum=1),
    FieldSpec("enable_prefix_caching", "bool", True, "automatic prefix caching"),
    # the traffic (`vllm bench serve`)
    FieldSpec("num_prompts", "int", 1000, "requests to send", minimum=1),
    FieldSpec("random_input_len", "int", 1024, "prompt tokens after the prefix", minimum=1),
    FieldSpec("random_output_len", "int", 128, "output tokens", minimum=1),
    FieldSpec("random_range_ratio", "float", 0.0, "lengths uniform in len x [1-r, 1+r]", minimum=0),
    FieldSpec("random_prefix_len", "int", 0, "shared prefix tokens of every prompt", minimum=0),
    FieldSpec("request_rate", "rate", math.inf, "requests per second, or inf (all at once)"),
    FieldSpec("burstiness", "float", 1.0, "gamma shape of the gaps; 1 = Poisson"),
    FieldSpec(
        "max_concurrency",
        "int",
        None,
        "requests in flight at most",
        minimum=1,
        optional=True,
        shown_default="no limit",
    ),
    FieldSpec("seed", "int", 0, "random seed of the workload", minimum=0),
    FieldSpec(
        "dataset_name",
        "choice",
        "random",
        "lengths: random (the random_* fields) or sharegpt (a fitted ShareGPT distribution)",
        choices=("random", *DATASET_NAMES),
    ),
    FieldSpec(
        "trace",
        "str",
        None,
        "JSONL trace to replay: arrivals, lengths and prefixes of every request",
        optional=True,
        shown_default="none",
    ),
    # what the client measures on top of the engine
    FieldSpec(
        "client_delay_ms",
        "float",
        0.0,
        "client + network delay added to each request's TTFT and E2E latency",
        minimum=0,
    ),
    FieldSpec(
        "client_jitter_ms",
        "float",
        0.0,
        "standard deviation of that delay per request (normal, cut at 0)",
        minimum=0,
    ),
    FieldSpec(
        "warmup_s", "float", 0.0, "seconds after the first send left out of the results", minimum=0
    ),
    FieldSpec(
        "cooldown_s",
        "float",
        0.0,
        "seconds before the last response left out of the results",
        minimum=0,
    ),
)
#: fields a trace replaces (its own arrivals and lengths)
TRACE_REPLACES = (
    "num_prompts",
    "random_input_len",
    "random_output_len",
    "random_range_ratio",
    "random_prefix_len",
    "request_rate",
    "burstiness",
)
_FIELDS = {f.name: f for f in SCENARIO_FIELDS}


@dataclass(frozen=True, slots=True)
class TrafficClass:
    """One kind of request in a traffic mix.

    weight: share of the requests (weights are normalized). input_len / output_len: mean
    lengths, each uniform in len x [1 - range_ratio, 1 + range_ratio]. prefix_len: tokens of a
    shared prefix (system prompt, document, repository context) before the request's own
    tokens; num_prefixes distinct prefixes, each request drawing one uniformly. max_tokens: the
    requests' max_tokens; outputs are clipped to it and finish with "stop" below it (None:
    max_tokens = output length, as `vllm bench serve` with ignore_eos, finishing "length").
    """

    name: str
    weight: float
    input_len: int
    output_len: int
    range_ratio: float = 0.0
    prefix_len: int = 0
    num_prefixes: int = 1
    max_tokens: int | None = None

    def __post_init__(self) -> None:
        where = f"mix class {self.name!r}"
        if not self.name:
            raise BadInputError("mix: every class needs a non-empty name")
        _check_number(f"{where}: weight", self.weight, 0, exclusive=True)
        for name in ("input_len", "output_len", "num_prefixes"):
            _check_int(f"{where}: {name}", getattr(self, name), 1)
        _check_int(f"{where}: prefix_len", self.prefix_len, 0)
        _check_number(f"{where}: range_ratio", self.range_ratio, 0)
        if self.range_ratio >= 1:
            raise BadInputError(f"{where}: range_ratio must be < 1, got {self.range_ratio}")
        if self.max_tokens is not None:
            _check_int(f"{where}: max_tokens", self.max_tokens, 1)


@dataclass(frozen=True, slots=True)
class ScenarioConfig:
    """A deployment and its traffic (fields: SCENARIO_FIELDS, plus an optional traffic mix that
    replaces the random_* workload)."""

    model: str | None = None
    gpu: str | None = None
    dtype: str = "auto"
    kv_cache_dtype: str = "auto"
    tensor_parallel_size: int = 1
    replicas: int = 1
    router: str = "round_robin"
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    max_model_len: int | None = None
    admission: str = "vllm"
    num_scheduler_steps: int = 1
    engine: str = "v1"
    enable_chunked_prefill: bool = True
    usage_context: str = "api_server"
    gpu_memory_utilization: float = 0.9
    block_size: int = 16
    enable_prefix_caching: bool = True
    num_prompts: int = 1000
    random_input_len: int = 1024
    random_output_len: int = 128
    random_range_ratio: float = 0.0
    random_prefix_len: int = 0
    request_rate: float = math.inf
    burstiness: float = 1.0
    max_concurrency: int | None = None
    seed: int = 0
    dataset_name: str = "random"
    trace: str | None = None
    client_delay_ms: float = 0.0
    client_jitter_ms: float = 0.0
    warmup_s: float = 0.0
    cooldown_s: float = 0.0
    mix: tuple[TrafficClass, ...] = field(default=())

    def __post_init__(self) -> None:
        for spec in SCENARIO_FIELDS:
            _validate(spec, getattr(self, spec.name))
        if not 0.0 < self.gpu_memory_utilization <= 1.0:
            raise BadInputError(
                f"gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization}"
            )
        if self.random_range_ratio >= 1:
            raise BadInputError(f"random_range_ratio must be < 1, got {self.random_range_ratio}")
        if not self.request_rate > 0:
            raise BadInputError(f"request_rate must be > 0 or inf, got {self.request_rate}")
        if not self.enable_chunked_prefill and self.engine != "v0":
            raise BadInputError(
                "enable_chunked_prefill false needs engine v0 (V1 always chunks prefills)"
            )
        if not (self.burstiness > 0 and math.isfinite(self.burstiness)):
            raise BadInputError(f"burstiness must be > 0, got {self.burstiness}")
        names = [c.name for c in self.mix]
        if len(set(names)) != len(names):
            raise BadInputError("mix: class names must be unique")
        if self.trace is not None:
            if self.mix:
                raise BadInputError("trace: a trace and a traffic mix exclude each other")
            if self.dataset_name != "random":
                raise BadInputError("trace: a trace and --dataset-name exclude each other")
            given = [
                name for name in TRACE_REPLACES if getattr(self, name) != _FIELDS[name].default
            ]
            if given:
                raise BadInputError(
                    f"trace: the trace sets arrivals and lengths; drop {', '.join(given)}"
                )
        if self.dataset_name != "random":
            given = [
                name
                for name in TRACE_REPLACES
                if name.startswith("random_") and getattr(self, name) != _FIELDS[name].default
            ]
            if self.mix or given:
                raise BadInputError(
                    f"dataset_name {self.dataset_name} sets the lengths; drop "
                    f"{', '.join(given) or 'the mix'}"
                )

    def to_dict(self) -> dict[str, Any]:
        """Plain, JSON-safe data (an infinite request rate is written "inf", as vLLM does)."""
        out = asdict(self)
        out["request_rate"] = "inf" if math.isinf(self.request_rate) else self.request_rate
        out["mix"] = [asdict(c) for c in self.mix]
        return out


def _check_int(name: str, value: Any, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadInputError(f"{name} must be an integer, got {value!r}")
    if value < low:
        raise BadInputError(f"{name} must be >= {low}, got {value}")


def _check_number(name: str, value: Any, low: float, exclusive: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        raise BadInputError(f"{name} must be a number, got {value!r}")
    if value < low or (exclusive and value == low):
        raise BadInputError(f"{name} must be {'>' if exclusive else '>='} {low}, got {value}")


def _validate(spec: FieldSpec, value: Any) -> None:
    name = spec.name
    if value is None:
        if not spec.optional:
            raise BadInputError(f"{name} must be given")
        return
    if spec.kind == "int":
        _check_int(name, value, int(spec.minimum) if spec.minimum is not None else -(2**63))
    elif spec.kind in ("float", "rate"):
        _check_number(name, value, spec.minimum if spec.minimum is not None else -math.inf)
    elif spec.kind == "bool":
        if not isinstance(value, bool):
            raise BadInputError(f"{name} must be true or false, got {value!r}")
    elif spec.kind == "choice":
        if value not in spec.choices:
            raise BadInputError(f"{name} must be one of {', '.join(spec.choices)}, got {value!r}")
    elif not isinstance(value, str) or not value.strip():
        raise BadInputError(f"{name} must be a non-empty string, got {value!r}")


def parse_field(name: str, raw: Any, where: str = "", label: str | None = None) -> Any:
    """A field's value from YAML or command-line text: "12" -> 12, "inf" -> inf, "true"/"false"
    for booleans, "none"/null for optional fields. Raises BadInputError naming the field (as
    `label` when given, e.g. the command-line flag)."""
    spec = _FIELDS[name]
    label = label or f"{where}{name}"
    if raw is None or (isinstance(raw, str) and raw.strip().lower() in ("none", "null")):
        if spec.optional:
            return None
        raise BadInputError(f"{label} must be given")
    try:
        if spec.kind == "int":
            if isinstance(raw, bool) or (isinstance(raw, float) and not raw.is_integer()):
                raise ValueError
            return int(raw) if isinstance(raw, int | float) else int(str(raw).strip(), 10)
        if spec.kind in ("float", "rate"):
            if isinstance(raw, bool):
                raise ValueError
            value = float(raw)
            if math.isnan(value) or (math.isinf(value) and spec.kind != "rate"):
                raise ValueError
            return value
        if spec.kind == "bool":
            if isinstance(raw, bool):
                return raw
            text = str(raw).strip().lower()
            if text in ("true", "yes", "1", "on"):
                return True
            if text in ("false", "no", "0", "off"):
                return False
            raise ValueError
    except (TypeError, ValueError):
        kind = {"int": "an integer", "bool": "true or false", "rate": "a number or inf"}
        raise BadInputError(
            f"{label} must be {kind.get(spec.kind, 'a number')}, got {raw!r}"
        ) from None
    return str(raw).strip()


def scenario_from_mapping(data: Any, where: str = "scenario") -> ScenarioConfig:
    """A ScenarioConfig from YAML-shaped data; every error is one line naming the field."""
    if not isinstance(data, Mapping):
        raise BadInputError(f"{where} must be a mapping of scenario fields")
    unknown = sorted(str(k) for k in data if k not in _FIELDS and k != "mix")
    if unknown:
        raise BadInputError(
            f"{where}: unknown field(s) {', '.join(unknown)} "
            f"(known: {', '.join([*_FIELDS, 'mix'])})"
        )
    values = {k: parse_field(k, v, f"{where}: ") for k, v in data.items() if k != "mix"}
    try:
        values["mix"] = _mix_from_data(data.get("mix"), where)
        return ScenarioConfig(**values)
    except BadInputError as exc:
        text = str(exc)
        raise BadInputError(text if text.startswith(where) else f"{where}: {text}") from None


_CLASS_FIELDS = {f.name: f for f in fields(TrafficClass)}


def _mix_from_data(raw: Any, where: str) -> tuple[TrafficClass, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list) or not raw:
        raise BadInputError(f"{where}: mix must be a non-empty list of traffic classes")
    classes = []
    for i, entry in enumerate(raw):
        at = f"{where}: mix[{i}]"
        if not isinstance(entry, Mapping):
            raise BadInputError(f"{at} must be a mapping (name, weight, input_len, ...)")
        unknown = sorted(str(k) for k in entry if k not in _CLASS_FIELDS)
        if unknown:
            raise BadInputError(
                f"{at}: unknown field(s) {', '.join(unknown)} (known: {', '.join(_CLASS_FIELDS)})"
            )
        missing = [k for k in ("name", "weight", "input_len", "output_len") if k not in entry]
        if missing:
            raise BadInputError(f"{at}: missing field(s) {', '.join(missing)}")
        try:
            classes.append(TrafficClass(**{str(k): v for k, v in entry.items()}))
        except BadInputError as exc:
            raise BadInputError(f"{at}: {exc}") from None
    return tuple(classes)


def load_scenario(path: str | Path) -> ScenarioConfig:
    """Read a scenario YAML file."""
    where = str(path)
    data = read_yaml_file(path, f"scenario file {where}", BadInputError)
    scenario = scenario_from_mapping(data if data is not None else {}, where)
    if scenario.trace is not None and not Path(scenario.trace).is_absolute():
        # a trace named in a scenario file is found beside the file
        scenario = replace(scenario, trace=str(Path(path).parent / scenario.trace))
    return scenario
