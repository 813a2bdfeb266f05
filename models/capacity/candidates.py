"""The candidate space of the capacity planner (issue #13): which deployment shapes of one model
to consider, and which of them can run at all.

A :class:`CandidateSpace` is the product of its axes (GPU type x tensor parallelism x weight
precision x KV-cache precision x ``max_num_seqs`` x ``max_num_batched_tokens`` x prefix caching)
plus a price per GPU-hour for each GPU type. :func:`enumerate_candidates` walks the product for
one model and splits it into the candidates that can be served and those that cannot, each with
a one-line reason (the first that applies, in this order): a tensor-parallel degree the model's
heads do not divide; fp8 on a GPU without fp8 support; weights that leave no KV cache at
``gpu_memory_utilization`` 0.9 (models.model_catalog.kv_cache_capacity, vLLM's 2 GiB activation
reserve); a KV cache smaller than the pool's longest request; ``max_num_batched_tokens`` below
``max_num_seqs`` (vLLM refuses to start); no price for the GPU.

The step-time predictor and KV capacity of each (model, GPU, TP, weights, KV cache) are built
once per process (:func:`predictor_for`, :func:`kv_cache_tokens`): a few ms each, shared by
every candidate that differs only in scheduler knobs, and by the simulator's verification.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from inferledger.core.errors import BadInputError
from models.capacity.profile import unknown
from models.capacity.types import Candidate
from models.gpu_catalog import UnsupportedPrecisionError, get_gpu
from models.model_catalog import DoesNotFitError, get_model, make_profile
from models.serving.scenario_run import scheduler_defaults
from models.steptime import RooflinePredictor

WEIGHT_DTYPES = ("auto", "bf16", "fp8")
KV_CACHE_DTYPES = ("auto", "fp8")
#: the largest step the predictor tabulates (larger steps are priced, just more slowly)
_TABLE_TOKENS = 8192 + 1024
#: the space's axes, in the order a candidate's label and the forms show them
SPACE_AXES = (
    "gpus",
    "tensor_parallel_sizes",
    "dtypes",
    "kv_cache_dtypes",
    "max_num_seqs",
    "max_num_batched_tokens",
    "prefix_caching",
)
_FIELDS = (*SPACE_AXES, "prices")


@dataclass(frozen=True, slots=True)
class CandidateSpace:
    """The axes to search and the GPU prices ($/GPU-hour, keyed by any catalog name or alias).

    ``max_num_seqs`` / ``max_num_batched_tokens`` entries of None mean vLLM's default for the
    GPU (models.serving.scenario.scheduler_defaults)."""

    gpus: tuple[str, ...] = ("H100", "H200")
    tensor_parallel_sizes: tuple[int, ...] = (1, 2, 4, 8)
    dtypes: tuple[str, ...] = ("auto", "fp8")
    kv_cache_dtypes: tuple[str, ...] = ("auto", "fp8")
    max_num_seqs: tuple[int | None, ...] = (None,)
    max_num_batched_tokens: tuple[int | None, ...] = (None,)
    prefix_caching: tuple[bool, ...] = (True,)
    prices: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _validate_space(self, "candidates")

    @property
    def size(self) -> int:
        """Candidates in the product (before feasibility)."""
        return math.prod(
            len(getattr(self, name)) for name in SPACE_AXES
        )  # fmt: skip

    def price(self, gpu: str) -> float | None:
        """$/GPU-hour of a GPU (any catalog name or alias), None when the space has none."""
        name = get_gpu(gpu).name
        for key, value in self.prices.items():
            if get_gpu(key).name == name:
                return float(value)
        return None


def _where(where: str, name: str) -> str:
    return f"{where}.{name}"


def _validate_space(space: CandidateSpace, where: str) -> None:
    """One-line BadInputError naming the first bad field."""
    for name in SPACE_AXES:
        values = getattr(space, name)
        if not isinstance(values, tuple) or not values:
            raise BadInputError(f"{_where(where, name)} must be a non-empty list")
        if len(set(values)) != len(values):
            raise BadInputError(f"{_where(where, name)} lists a value twice: {list(values)}")
    seen: dict[str, str] = {}
    for gpu in space.gpus:
        if not isinstance(gpu, str) or not gpu.strip():
            raise BadInputError(f"{_where(where, 'gpus')} must be GPU names, got {gpu!r}")
        try:
            canonical = get_gpu(gpu).name
        except BadInputError as exc:
            raise BadInputError(f"{_where(where, 'gpus')}: {exc}") from None
        if canonical in seen:
            raise BadInputError(
                f"{_where(where, 'gpus')}: {seen[canonical]!r} and {gpu!r} are the same GPU"
            )
        seen[canonical] = gpu
    for tp in space.tensor_parallel_sizes:
        if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1 or tp & (tp - 1):
            raise BadInputError(
                f"{_where(where, 'tensor_parallel_sizes')} must be powers of two (1, 2, 4, 8, "
                f"...), got {tp!r}"
            )
    for dtype in space.dtypes:
        if dtype not in WEIGHT_DTYPES:
            raise BadInputError(
                f"{_where(where, 'dtypes')} must be among {', '.join(WEIGHT_DTYPES)}, got {dtype!r}"
            )
    for kv in space.kv_cache_dtypes:
        if kv not in KV_CACHE_DTYPES:
            raise BadInputError(
                f"{_where(where, 'kv_cache_dtypes')} must be among {', '.join(KV_CACHE_DTYPES)}, "
                f"got {kv!r}"
            )
    for name in ("max_num_seqs", "max_num_batched_tokens"):
        for value in getattr(space, name):
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < 1
            ):
                raise BadInputError(
                    f"{_where(where, name)} must be positive integers or null (vLLM's default), "
                    f"got {value!r}"
                )
    for value in space.prefix_caching:
        if not isinstance(value, bool):
            raise BadInputError(
                f"{_where(where, 'prefix_caching')} must be true or false, got {value!r}"
            )
    if not isinstance(space.prices, Mapping):
        raise BadInputError(f"{_where(where, 'prices')} must map GPU names to $/GPU-hour")
    priced: dict[str, str] = {}
    for gpu, price in space.prices.items():
        at = f"{_where(where, 'prices')}.{gpu}"
        try:
            canonical = get_gpu(str(gpu)).name
        except BadInputError as exc:
            raise BadInputError(f"{at}: {exc}") from None
        if canonical in priced:
            raise BadInputError(f"{at}: {priced[canonical]!r} already prices {canonical}")
        priced[canonical] = str(gpu)
        if (
            isinstance(price, bool)
            or not isinstance(price, int | float)
            or not math.isfinite(price)
            or price <= 0
        ):
            raise BadInputError(f"{at} must be a price > 0 in $/GPU-hour, got {price!r}")


def _as_tuple(value: Any, at: str) -> tuple[Any, ...]:
    if isinstance(value, list | tuple):
        return tuple(value)
    if isinstance(value, str | int | float | bool) or value is None:
        return (value,)
    raise BadInputError(f"{at} must be a list, got {type(value).__name__}")


def space_from_mapping(data: Any, where: str = "candidates") -> CandidateSpace:
    """A CandidateSpace from YAML/JSON-shaped data (lists or single values per axis; missing
    axes take the defaults); every error is one line naming the field."""
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise BadInputError(f"{where} must be a mapping of candidate axes")
    unknown(where, data, _FIELDS)
    values: dict[str, Any] = {}
    for name in SPACE_AXES:
        if name in data:
            items = _as_tuple(data[name], _where(where, name))
            if name in ("dtypes", "kv_cache_dtypes", "gpus"):
                items = tuple(str(v).strip() if isinstance(v, str) else v for v in items)
            values[name] = items
    if "prices" in data:
        prices = data["prices"] if data["prices"] is not None else {}
        if not isinstance(prices, Mapping):
            raise BadInputError(f"{_where(where, 'prices')} must map GPU names to $/GPU-hour")
        values["prices"] = {str(k): v for k, v in prices.items()}
    try:
        return CandidateSpace(**values)
    except BadInputError as exc:  # __post_init__ names fields "candidates.<field>"
        raise BadInputError(str(exc).replace("candidates.", f"{where}.", 1)) from None


def space_to_mapping(space: CandidateSpace) -> dict[str, Any]:
    """JSON-safe data that space_from_mapping reads back to an equal space."""
    out: dict[str, Any] = {name: list(getattr(space, name)) for name in SPACE_AXES}
    out["prices"] = {str(k): float(v) for k, v in space.prices.items()}
    return out


# --- predictors and KV capacity, built once per deployment shape ------------------------------


def _kv_arg(kv_cache_dtype: str) -> str | None:
    return None if kv_cache_dtype == "auto" else kv_cache_dtype


@functools.lru_cache(maxsize=512)
def _predictor(model: str, gpu: str, dtype: str, tp: int, kv: str) -> RooflinePredictor:
    profile = make_profile(model, dtype, tp, _kv_arg(kv))
    return RooflinePredictor(profile, get_gpu(gpu), table_tokens=_TABLE_TOKENS)


def predictor_for(candidate: Candidate) -> RooflinePredictor:
    """The step-time predictor of one replica of the candidate (cached per deployment shape).
    Raises UnsupportedPrecisionError / BadInputError when the shape cannot be served."""
    c = candidate
    return _predictor(
        get_model(c.model).name,
        get_gpu(c.gpu).name,
        c.dtype,
        c.tensor_parallel_size,
        c.kv_cache_dtype,
    )


@functools.lru_cache(maxsize=512)
def _kv_tokens(model: str, gpu: str, dtype: str, tp: int, kv: str) -> int:
    return _predictor(model, gpu, dtype, tp, kv).kv_capacity().tokens


def kv_cache_tokens(candidate: Candidate) -> int:
    """KV-cache tokens of one replica at gpu_memory_utilization 0.9 (raises DoesNotFitError)."""
    c = candidate
    return _kv_tokens(
        get_model(c.model).name,
        get_gpu(c.gpu).name,
        c.dtype,
        c.tensor_parallel_size,
        c.kv_cache_dtype,
    )


def scheduler_limits(candidate: Candidate) -> tuple[int, int]:
    """(max_num_seqs, max_num_batched_tokens) as vLLM resolves them for the candidate."""
    seqs, tokens = scheduler_defaults(candidate.gpu)
    return (
        candidate.max_num_seqs if candidate.max_num_seqs is not None else seqs,
        candidate.max_num_batched_tokens
        if candidate.max_num_batched_tokens is not None
        else tokens,
    )


def infeasible_reason(candidate: Candidate, max_context: float | None = None) -> str | None:
    """Why the candidate cannot serve the pool (the first reason of the module docstring), or
    None when it can."""
    c = candidate
    try:
        kv_tokens = kv_cache_tokens(c)
    except (UnsupportedPrecisionError, DoesNotFitError) as exc:
        return str(exc)
    except BadInputError as exc:  # a TP degree the model's heads do not divide
        return str(exc)
    if max_context is not None and kv_tokens < max_context:
        return (
            f"the KV cache holds {kv_tokens:,} tokens, fewer than the pool's longest request "
            f"({math.ceil(max_context):,} tokens)"
        )
    seqs, tokens = scheduler_limits(c)
    if tokens < seqs:
        return f"max_num_batched_tokens ({tokens}) is below max_num_seqs ({seqs})"
    if not c.price_per_gpu_hour > 0:
        return f"no price for GPU {c.gpu}"
    return None


def iter_candidates(model: str, space: CandidateSpace) -> Iterator[Candidate]:
    """Every candidate of the product for one model, lazily, GPUs by their catalog names."""
    name = get_model(model).name
    gpus = [(get_gpu(g).name, space.price(g) or 0.0) for g in space.gpus]
    for (gpu, price), tp, dtype, kv, seqs, tokens, prefix in itertools.product(
        gpus,
        space.tensor_parallel_sizes,
        space.dtypes,
        space.kv_cache_dtypes,
        space.max_num_seqs,
        space.max_num_batched_tokens,
        space.prefix_caching,
    ):
        yield Candidate(
            model=name,
            gpu=gpu,
            tensor_parallel_size=tp,
            dtype=dtype,
            kv_cache_dtype=kv,
            max_num_seqs=seqs,
            max_num_batched_tokens=tokens,
            enable_prefix_caching=prefix,
            price_per_gpu_hour=price,
        )


def enumerate_candidates(
    model: str, space: CandidateSpace, *, max_context: float | None = None
) -> tuple[list[Candidate], list[tuple[Candidate, str]]]:
    """(feasible candidates, [(infeasible candidate, reason)]) for one model over the space.
    ``max_context``: the pool's longest request (prompt + output tokens), which one replica's
    KV cache must hold."""
    feasible: list[Candidate] = []
    infeasible: list[tuple[Candidate, str]] = []
    for candidate in iter_candidates(model, space):
        reason = infeasible_reason(candidate, max_context)
        if reason is None:
            feasible.append(candidate)
        else:
            infeasible.append((candidate, reason))
    return feasible, infeasible
