"""The capacity planner's shared vocabulary (issue #13): a workload profile and where each of
its figures came from, the scenario knobs, SLOs, candidate deployments and what planning them
returns. Plain frozen dataclasses, no behaviour beyond validation: profile.py builds and edits
profiles, knobs.py applies the knobs, pools.py groups apps into pools, analytic.py screens
candidates, search.py verifies them on the simulator, forecast.py projects traffic, plan.py
runs the whole plan. docs/capacity-planner.md explains.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from inferledger.core.errors import BadInputError

HOURS_OF_WEEK = 168
#: the planner's version, saved with every plan (bump when a change alters its numbers)
PLANNER_VERSION = "1"


class Source(StrEnum):
    """Where a profile figure came from: the ledger's own data, a calibrated model, or an
    assumption (a default or a user's edit)."""

    MEASURED = "measured"
    CALIBRATED = "calibrated"
    ASSUMED = "assumed"


class SloClass(StrEnum):
    """Apps of one class share a pool and its SLO."""

    INTERACTIVE = "interactive"
    BATCH = "batch"


@dataclass(frozen=True, slots=True)
class AppProfile:
    """One app's traffic as the planner needs it.

    hourly_requests: 168 mean requests per hour, one per UTC hour of the week (index 0 = Monday
        00:00-01:00 UTC).
    burstiness: gamma shape of the inter-arrival gaps inside an hour (1 = Poisson, < 1 burstier).
    lengths: joint (prompt_tokens, output_tokens) samples of the app's requests (at most
        MAX_LENGTH_SAMPLES; prompt_tokens include the shared prefix).
    prefix_len: tokens of a prefix the app's requests share (system prompt, document).
    prefix_hit_rate: cached prompt tokens / prompt tokens observed (0..1).
    acceptance_rate: accepted outcomes / decided tasks of the app's workflows, 0..1 (None:
        unknown).
    requests_per_task: LLM requests per task (retries, fallbacks, multi-step workflows), >= 1.
    history: hourly request counts over the profile's window (oldest first), for the forecast;
        history_start is the first hour as Unix seconds (a whole UTC hour).
    sources: field name -> Source, for every field above that came from somewhere.
    """

    app: str
    model: str
    hourly_requests: tuple[float, ...]
    lengths: tuple[tuple[int, int], ...]
    burstiness: float = 1.0
    prefix_len: int = 0
    prefix_hit_rate: float = 0.0
    acceptance_rate: float | None = None
    requests_per_task: float = 1.0
    slo_class: SloClass = SloClass.INTERACTIVE
    history: tuple[float, ...] = ()
    history_start: float = 0.0
    sources: Mapping[str, Source] = field(default_factory=dict)

    def __post_init__(self) -> None:
        where = f"app {self.app!r}"
        if not self.app:
            raise BadInputError("every app in a profile needs a name")
        if len(self.hourly_requests) != HOURS_OF_WEEK:
            raise BadInputError(
                f"{where}: hourly_requests needs {HOURS_OF_WEEK} values (one per hour of the "
                f"week), got {len(self.hourly_requests)}"
            )
        if any(not (v >= 0) for v in self.hourly_requests):
            raise BadInputError(f"{where}: hourly_requests must be >= 0")
        if not self.lengths:
            raise BadInputError(f"{where}: needs at least one (prompt, output) length sample")
        if any(p < 1 or o < 1 for p, o in self.lengths):
            raise BadInputError(f"{where}: prompt and output lengths must be >= 1 token")
        if not self.burstiness > 0:
            raise BadInputError(f"{where}: burstiness must be > 0, got {self.burstiness}")
        if not 0 <= self.prefix_hit_rate < 1:
            raise BadInputError(f"{where}: prefix_hit_rate must be in [0, 1)")
        if self.prefix_len < 0:
            raise BadInputError(f"{where}: prefix_len must be >= 0")
        if self.acceptance_rate is not None and not 0 <= self.acceptance_rate <= 1:
            raise BadInputError(f"{where}: acceptance_rate must be in [0, 1]")
        if not self.requests_per_task >= 1:
            raise BadInputError(f"{where}: requests_per_task must be >= 1")

    @property
    def peak_rate(self) -> float:
        """Requests per second in the app's busiest hour of the week."""
        return max(self.hourly_requests) / 3600.0


@dataclass(frozen=True, slots=True)
class WorkloadProfile:
    """The traffic of a scope over a window: one AppProfile per app.

    window_start / window_end: Unix seconds of the ledger window measured (0, 0 when typed in).
    scope: what was selected, e.g. {"apps": ["chat"], "routes": []}, for the decision record.
    """

    apps: tuple[AppProfile, ...]
    window_start: float = 0.0
    window_end: float = 0.0
    scope: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        names = [a.app for a in self.apps]
        if len(set(names)) != len(names):
            raise BadInputError("a profile names each app once")

    def app(self, name: str) -> AppProfile:
        for a in self.apps:
            if a.app == name:
                return a
        raise BadInputError(f"no app {name!r} in the profile")


@dataclass(frozen=True, slots=True)
class Move:
    """Move `share` of an app's traffic to another model (`to_model`) or to a hosted API
    (`hosted`: priced per token from the price book, off the GPUs planned here)."""

    app: str
    share: float
    to_model: str | None = None
    hosted: str | None = None


@dataclass(frozen=True, slots=True)
class Burst:
    """The peak hour's rate × factor for `minutes` minutes (the plan must hold through it)."""

    factor: float
    minutes: float


@dataclass(frozen=True, slots=True)
class Knobs:
    """What-if changes applied to a profile before planning (knobs.apply_knobs).

    traffic: every app's rate × this; traffic_by_app: per app, on top of it.
    context / output: prompt / output lengths × this. prefix_hit_delta: added to every app's
    prefix hit rate (clipped to [0, 0.95]). remove_apps: dropped. add_apps: added (typed in).
    moves: shares moved to another model or to a hosted API. fallback: a degraded hosted
    provider: a Move(app, share, to_model=...) -- that share of the hosted app's traffic falls
    back onto the self-hosted model (a bare (app, share) pair goes to the profile's only
    self-hosted model). burst: the peak must hold through it.
    """

    traffic: float = 1.0
    traffic_by_app: Mapping[str, float] = field(default_factory=dict)
    context: float = 1.0
    output: float = 1.0
    prefix_hit_delta: float = 0.0
    remove_apps: tuple[str, ...] = ()
    add_apps: tuple[AppProfile, ...] = ()
    moves: tuple[Move, ...] = ()
    fallback: tuple[Move | tuple[str, float], ...] = ()
    burst: Burst | None = None


@dataclass(frozen=True, slots=True)
class Slo:
    """Targets on the 95th percentile, in seconds (None: no target on that metric). Goodput is
    the rate of requests meeting every target."""

    ttft_p95_s: float | None = None
    itl_p95_s: float | None = None
    e2e_p95_s: float | None = None

    def __post_init__(self) -> None:
        for name in ("ttft_p95_s", "itl_p95_s", "e2e_p95_s"):
            v = getattr(self, name)
            if v is not None and not v > 0:
                raise BadInputError(f"SLO {name} must be > 0 seconds, got {v}")
        if self.ttft_p95_s is None and self.itl_p95_s is None and self.e2e_p95_s is None:
            raise BadInputError("an SLO needs at least one target (ttft, itl or e2e)")


@dataclass(frozen=True, slots=True)
class Candidate:
    """One deployment shape for a pool: what `vllm serve` is told on one replica, and its
    price. Replicas are what the planner decides."""

    model: str
    gpu: str
    tensor_parallel_size: int = 1
    dtype: str = "auto"  # weights: auto (bf16), bf16, fp8
    kv_cache_dtype: str = "auto"  # auto or fp8
    max_num_seqs: int | None = None  # None: vLLM's default for the GPU
    max_num_batched_tokens: int | None = None
    enable_prefix_caching: bool = True
    price_per_gpu_hour: float = 0.0

    @property
    def gpus(self) -> int:
        return self.tensor_parallel_size

    def label(self) -> str:
        parts = [self.model, f"{self.tensor_parallel_size}x{self.gpu}"]
        if self.dtype not in ("auto", "bf16"):
            parts.append(f"w-{self.dtype}")
        if self.kv_cache_dtype != "auto":
            parts.append(f"kv-{self.kv_cache_dtype}")
        if self.max_num_seqs is not None:
            parts.append(f"seqs={self.max_num_seqs}")
        if self.max_num_batched_tokens is not None:
            parts.append(f"tokens={self.max_num_batched_tokens}")
        if not self.enable_prefix_caching:
            parts.append("no-prefix-cache")
        return " ".join(parts)


@dataclass(frozen=True, slots=True)
class Pool:
    """Apps planned together: one SLO class and one model. pools.pool_stats(pool) and
    pools.app_shares(pool) derive the pooled lengths and each app's share at the pool's
    peak hour."""

    name: str  # "interactive/llama-3.1-8b"
    slo_class: SloClass
    model: str
    apps: tuple[AppProfile, ...]
    slo: Slo
