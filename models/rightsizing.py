"""Right-sizing a self-hosted deployment from what its replicas did (issue #10, §4 Platform):
"deployment X was 72 % idle; N fewer GPUs would have met the observed peak".

Inputs are per-window figures over the time scrapes covered (sql/queries/rightsizing_windows.sql
builds them from vLLM's gauges and counters, 5-minute windows by default); nothing here reads
the ledger. docs/efficiency.md ("Right-sizing") states the method, its headroom and its limits.

**Load of a window**, in replicas, is the larger of two measures:

- the *compute replicas* when the deployment's model and GPU are known to the catalogs (a
  :class:`StepModel` wraps the step-time predictor, models/steptime.py): the engine-step time
  the window's tokens cost at a replica's capacity, over the window. vLLM batches continuously:
  a decode step reads every weight once whatever the batch, so four replicas each running one
  or two requests all window are four *busy* replicas, but one replica would run the same
  sequences as a batch of six in a step barely longer than a batch of one. So a replica's
  capacity is not its time (busy share saturates at 100 % as soon as one request runs
  all the time) but the tokens it can produce: decode at the *capacity batch* b* -- the largest
  batch whose step takes at most STEP_SLOWDOWN (2) times a lone sequence's step (past that the
  step is compute-bound and a larger batch adds time in proportion: the roofline's knee), at
  most MAX_BATCH and at most what the KV cache holds at the window's context -- costs
  ``t(b*, b*·L) / b*`` seconds a token; a prompt token computed (prefix-cache hits excluded)
  costs ``t(chunk) / chunk`` for a PREFILL_CHUNK_TOKENS chunk (prefill is compute-bound: it
  does not batch for free). With D tokens generated, P prompt tokens computed and T covered
  seconds per replica, ``compute replicas = (D·t(b*)/b* + P·t(chunk)/chunk) / T`` and on n
  replicas each runs ``u(n) = compute replicas / n`` of its capacity (monotonic in n). L, the
  mean context a decoding sequence attends to, is the larger of two estimates: KV tokens in
  use ÷ mean running requests (Little's law: the requests' seconds running ÷ T) and (prompt
  tokens + D/2) ÷ requests finished. Why not the time share of the merged replicas,
  ``(D/C)·t(C/n)/T``: by Little's law D/C = T/t̄ (t̄ the observed token-weighted step time),
  so it is about t(C/n)/t̄, near 1 whenever a replica runs a request at all times -- the busy
  share again, blind to batching.
  Else (model or GPU unknown, or a window without token counters) the *busy replicas*: the
  replicas' shares of covered time with a request running, summed -- conservative: two
  replicas each serving one request all window count 2, though one replica would batch both.
- the *KV replicas*: the replicas' mean KV-cache usage, summed (merged replicas' caches add).

**Need of a window** = load / target utilisation (0.8: 20 % headroom), rounded up.

**Saturated window**: a request was preempted, or requests waited -- the *sustained* waiting
(below) at least WAITING_THRESHOLD. A gauge sample of waiting requests stands for the time
until its replica's next scrape; scraped every 120 s, one sample that caught a burst (a
scheduler step's wait on an idle fleet) stands for 120 s and a 5-minute mean passes 0.5 --
the demo's batch pool, 90 % idle, read "add capacity" that way. So a sample's queue counts for
its whole stand only when it was still there at the replica's next scrape (or waited on a
KV cache at least 90 % full, the marts' KV_HIGH_USAGE); a queue seen at one scrape only stands
for at most LONE_WAIT_S (15 s, the default scrape interval, at which the threshold was set),
so ``sustained = held + lone · min(1, LONE_WAIT_S / stand)``. A saturated window's load is
demand that did *not* fit, so its need is at least every replica that ran; a deployment with
any saturated window is never cut ("add capacity").

**Peak need** = the largest need over the windows, at least ``min_replicas``; the GPUs that
could go = (replicas held − peak need) x GPUs per replica; the saving a week = those GPUs x
the range's $/GPU-hour x 168 h. **Idle share** = 1 − busy replica-seconds ÷ covered
replica-seconds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from enum import StrEnum

from models.execution_time import ExecutionTimePredictor, StepShape

#: A replica is planned to run at most this busy (and this full of KV cache): 20 % headroom.
TARGET_UTILIZATION = 0.8
#: A window is saturated when at least this many requests waited on average over it (the
#: replicas' time-weighted means of *sustained* waiting, summed; see the module docstring) or
#: one was preempted. Not any wait at all: a burst caught at a scrape waits a scheduler step
#: or two (tens of ms) on an idle fleet, and a threshold of 0 called every deployment of the
#: demo's week saturated (the batch pool, 91 % idle, in 51 of 2,012 windows with a mean of
#: 0.01 waiting).
WAITING_THRESHOLD = 0.5
#: A waiting sample whose queue was gone at its replica's next scrape stands for at most this
#: many seconds (the default scrape interval, at which WAITING_THRESHOLD was set).
LONE_WAIT_S = 15.0
#: The capacity batch: the largest whose decode step takes at most this many times a lone
#: sequence's step (the roofline's knee: past it a step is compute-bound).
STEP_SLOWDOWN = 2.0
#: The largest decode batch considered (vLLM's max_num_seqs is 256 to 1024 by version).
MAX_BATCH = 1024
#: Prompt tokens are computed in chunks of this many (vLLM V1's default token budget).
PREFILL_CHUNK_TOKENS = 8192
#: The windows the load is taken over (sql/queries/rightsizing_windows.sql's $window_s).
WINDOW_S = 300
HOURS_PER_WEEK = 168.0
#: Loads this close above a whole number of replicas round down (float noise, not demand).
_EPS = 1e-9
#: Contexts are looked up in steps of this many tokens (the step-time caches' key).
_CONTEXT_STEP = 64


class Verdict(StrEnum):
    """What a finding recommends."""

    CUT = "cut"  # fewer GPUs would have met the observed peak
    RIGHT_SIZED = "right_sized"  # the peak needed every replica held
    ADD_CAPACITY = "add_capacity"  # requests waited or were preempted: saturated
    NO_DATA = "no_data"  # no scraped time in the range


class Binding(StrEnum):
    """Which measure set the peak need."""

    COMPUTE = "compute"  # engine-step time at capacity batch (model and GPU known)
    BUSY = "busy"  # busy replicas (model or GPU unknown)
    KV = "kv"
    SATURATED = "saturated"
    MINIMUM = "minimum"  # the floor of min_replicas


@dataclass(frozen=True, slots=True)
class Window:
    """One window of one deployment, over the replica time scrapes covered in it.

    ``busy_replicas`` and ``kv_replicas`` are sums over the replicas up in the window of each
    replica's busy share (of its covered time) and mean KV-cache usage (0..1); ``waiting`` is
    the replicas' mean waiting requests, summed, and ``waiting_held`` the part of it from
    samples whose queue was still there at the replica's next scrape (or waited on a full KV
    cache; None: not known, all of it counts); ``samples`` is the gauge samples behind it (0:
    not known); ``busy_s`` and ``covered_s`` are replica-seconds (covered: scraped; busy:
    covered with a request running).

    For the compute load (all summed over the replicas; None: not scraped): ``running`` mean
    running requests, ``running_s`` the finished requests' seconds running (vLLM's
    request_inference_time_seconds sum), counter increases of ``generation_tokens``,
    ``prompt_tokens``, ``prefix_hit_tokens`` and ``requests_finished``, and the KV-cache
    tokens in use (``kv_tokens``) and held (``kv_capacity_tokens``)."""

    start: datetime
    replicas_up: int
    busy_replicas: float
    kv_replicas: float
    waiting: float
    preemptions: float
    busy_s: float
    covered_s: float
    waiting_held: float | None = None
    samples: int = 0
    running: float = 0.0
    running_s: float | None = None
    generation_tokens: float | None = None
    prompt_tokens: float | None = None
    prefix_hit_tokens: float | None = None
    requests_finished: float | None = None
    kv_tokens: float | None = None
    kv_capacity_tokens: float | None = None

    def __post_init__(self) -> None:
        for name in ("busy_replicas", "kv_replicas", "waiting", "preemptions", "busy_s", "running"):
            _check(self, name, getattr(self, name))
        for name in (
            "waiting_held", "running_s", "generation_tokens", "prompt_tokens",
            "prefix_hit_tokens", "requests_finished", "kv_tokens", "kv_capacity_tokens",
        ):  # fmt: skip
            value = getattr(self, name)
            if value is not None:
                _check(self, name, value)
        if self.replicas_up < 0 or self.samples < 0:
            raise ValueError(f"window {self.start}: replicas_up and samples must be >= 0")
        if not (math.isfinite(self.covered_s) and self.covered_s >= self.busy_s - 1e-6):
            raise ValueError(
                f"window {self.start}: busy_s {self.busy_s} exceeds covered_s {self.covered_s}"
            )

    @property
    def sustained_waiting(self) -> float:
        """Mean waiting requests with a queue seen at one scrape only standing for at most
        LONE_WAIT_S (the module docstring's rule)."""
        if self.waiting_held is None or self.samples <= 0 or self.covered_s <= 0:
            return self.waiting
        held = min(self.waiting_held, self.waiting)
        stand = self.covered_s / self.samples
        return held + (self.waiting - held) * min(1.0, LONE_WAIT_S / stand)


def _check(window: Window, name: str, value: float) -> None:
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"window {window.start}: {name} must be >= 0, got {value!r}")


@dataclass(frozen=True, slots=True)
class StepModel:
    """Engine-step times of one replica of a deployment: a step-time predictor
    (models.steptime.build_predictor for its model, weight dtype, GPU and tensor parallelism)
    and a label naming them for the message. Token costs are cached by context."""

    predictor: ExecutionTimePredictor
    label: str
    step_slowdown: float = STEP_SLOWDOWN
    max_batch: int = MAX_BATCH
    prefill_chunk_tokens: int = PREFILL_CHUNK_TOKENS
    _cache: dict[tuple[str, int, int], float] = field(
        default_factory=dict, repr=False, compare=False, hash=False
    )

    def __post_init__(self) -> None:
        if not self.step_slowdown >= 1 or self.max_batch < 1 or self.prefill_chunk_tokens < 1:
            raise ValueError("step_slowdown must be >= 1, max_batch and prefill chunk >= 1")

    def _decode_step_s(self, batch: int, context: float) -> float:
        return self.predictor.step_time_s(
            StepShape(num_decode=batch, decode_context_sum=round(batch * context))
        )

    def capacity_batch(self, context: float, kv_capacity_tokens: float | None = None) -> int:
        """b*: the largest batch whose step at this context takes at most step_slowdown times
        a batch of one's, at most max_batch and at most what the KV cache holds."""
        cap = self.max_batch
        if kv_capacity_tokens is not None and context > 0:
            cap = min(cap, max(1, math.floor(kv_capacity_tokens / context)))
        limit = self.step_slowdown * self._decode_step_s(1, context)
        lo, hi = 1, cap  # the step time grows with the batch: bisect for the last within limit
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self._decode_step_s(mid, context) <= limit:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def decode_token_s(self, context: float, kv_capacity_tokens: float | None = None) -> float:
        """Seconds of engine step one generated token costs at the capacity batch."""
        c = round(max(context, 0.0) / _CONTEXT_STEP)
        kv = -1 if kv_capacity_tokens is None else round(kv_capacity_tokens)
        key = ("decode", c, kv)
        cached = self._cache.get(key)
        if cached is None:
            ctx = c * _CONTEXT_STEP
            b = self.capacity_batch(ctx, kv_capacity_tokens)
            cached = self._cache[key] = self._decode_step_s(b, ctx) / b
        return cached

    def prefill_token_s(self, position: float) -> float:
        """Seconds of engine step one computed prompt token costs, in full chunks whose tokens
        sit at ``position`` on average (their attention's context)."""
        p = round(max(position, 0.0) / _CONTEXT_STEP)
        key = ("prefill", p, 0)
        cached = self._cache.get(key)
        if cached is None:
            k = self.prefill_chunk_tokens
            shape = StepShape(
                prefill_tokens=k, prefill_attention=k * p * _CONTEXT_STEP, num_prefill_seqs=1
            )
            cached = self._cache[key] = self.predictor.step_time_s(shape) / k
        return cached


def compute_replicas(window: Window, model: StepModel) -> float | None:
    """The window's engine-step work at capacity batch, in replicas (module docstring); None
    when the window has no token counters (then the busy basis stands in)."""
    if window.generation_tokens is None or window.covered_s <= 0 or window.replicas_up < 1:
        return None
    t = window.covered_s / window.replicas_up  # covered seconds per replica
    d = window.generation_tokens
    prompt = window.prompt_tokens or 0.0
    p = max(prompt - (window.prefix_hit_tokens or 0.0), 0.0)
    if d <= 0 and p <= 0:
        return 0.0
    running = window.running_s / t if window.running_s else window.running
    requests = window.requests_finished or 0.0
    if requests > 0:
        context = (prompt + d / 2) / requests
    elif window.kv_tokens is not None and running > 0:
        context = window.kv_tokens / running
    else:
        context = 0.0
    kv_capacity = (
        window.kv_capacity_tokens / window.replicas_up
        if window.kv_capacity_tokens is not None
        else None
    )
    # a computed prompt token sits after the cached prefix: on average at the prompt's
    # (1 + hit share) / 2
    mean_prompt = prompt / requests if requests > 0 else context
    hit_share = (window.prefix_hit_tokens or 0.0) / prompt if prompt > 0 else 0.0
    position = mean_prompt * (1 + min(hit_share, 1.0)) / 2
    work = d * model.decode_token_s(context, kv_capacity) + p * model.prefill_token_s(position)
    return work / t


def compute_utilization(window: Window, model: StepModel, replicas: int) -> float | None:
    """u(n): the share of each of n replicas' capacity the window's work would take."""
    if replicas < 1:
        raise ValueError(f"replicas must be >= 1, got {replicas}")
    load = compute_replicas(window, model)
    return None if load is None else load / replicas


@dataclass(frozen=True, slots=True)
class Deployment:
    """A self-hosted deployment over the range: its replicas' GPUs, the range's GPU price
    (None: unpriced), its windows (those with scraped time) and its step-time model (None:
    its model or GPU is not known to the catalogs; ``step_model_note`` says why)."""

    name: str
    gpus_per_replica: int
    price_per_gpu_hour: float | None
    windows: Sequence[Window]
    step_model: StepModel | None = None
    step_model_note: str | None = None

    def __post_init__(self) -> None:
        if self.gpus_per_replica < 1:
            raise ValueError(f"{self.name}: gpus_per_replica must be >= 1")
        if self.price_per_gpu_hour is not None and not (
            math.isfinite(self.price_per_gpu_hour) and self.price_per_gpu_hour >= 0
        ):
            raise ValueError(f"{self.name}: price_per_gpu_hour must be >= 0")


@dataclass(frozen=True, slots=True)
class Finding:
    """The right-sizing finding of one deployment (see the module docstring). ``basis`` is
    the load's measure ("compute" or "busy"); ``peak_compute_replicas`` the peak window's
    compute replicas (None on the busy basis)."""

    deployment: str
    verdict: Verdict
    binding: Binding | None
    idle_share: float | None
    covered_hours: float
    windows: int
    saturated_windows: int
    first_saturated: datetime | None
    replicas_held: int
    gpus_per_replica: int
    gpus_held: int
    peak_need_replicas: int
    peak_start: datetime | None
    peak_busy_replicas: float
    peak_kv_replicas: float
    gpus_to_cut: int
    price_per_gpu_hour: float | None
    saving_per_week: float | None
    message: str
    basis: str = "busy"
    peak_compute_replicas: float | None = None
    step_model: str | None = None


def window_load(window: Window, model: StepModel | None = None) -> tuple[float, Binding]:
    """The window's load in replicas and its measure: compute replicas when ``model`` is given
    (0 for a window without token counters: a range's first window, a counter gap -- the
    deployment's other windows carry its compute load), else busy replicas; KV replicas when
    larger."""
    if model is None:
        load, basis = window.busy_replicas, Binding.BUSY
    else:
        load, basis = compute_replicas(window, model) or 0.0, Binding.COMPUTE
    return (window.kv_replicas, Binding.KV) if window.kv_replicas > load else (load, basis)


def window_need(
    window: Window,
    target_utilization: float = TARGET_UTILIZATION,
    waiting_threshold: float = WAITING_THRESHOLD,
    model: StepModel | None = None,
) -> int:
    """Replicas a window needed: its load (:func:`window_load`) over the target utilisation,
    rounded up; a saturated window needs at least every replica that ran."""
    return _rate(window, model, target_utilization, waiting_threshold)[0]


def _rate(
    window: Window, model: StepModel | None, target_utilization: float, waiting_threshold: float
) -> tuple[int, float, Binding, bool]:
    """(need, load, the load's measure, saturated) of a window: window_need's figures."""
    load, measure = window_load(window, model)
    need = math.ceil(load / target_utilization - _EPS) if load > 0 else 0
    saturated = is_saturated(window, waiting_threshold)
    return (max(need, window.replicas_up) if saturated else need), load, measure, saturated


def is_saturated(window: Window, waiting_threshold: float = WAITING_THRESHOLD) -> bool:
    """A request was preempted, or the sustained waiting was at least the threshold."""
    waiting = window.sustained_waiting
    return (waiting > 0 and waiting >= waiting_threshold) or window.preemptions > 0


def rightsize(
    deployment: Deployment,
    *,
    target_utilization: float = TARGET_UTILIZATION,
    min_replicas: int = 1,
    waiting_threshold: float = WAITING_THRESHOLD,
) -> Finding:
    """The finding for one deployment over its windows (see the module docstring)."""
    if not 0 < target_utilization <= 1:
        raise ValueError(f"target_utilization must be in (0, 1], got {target_utilization}")
    if min_replicas < 1:
        raise ValueError(f"min_replicas must be >= 1, got {min_replicas}")
    d = deployment
    windows = [w for w in d.windows if w.covered_s > 0]
    gpus = d.gpus_per_replica
    label = d.step_model.label if d.step_model is not None else None
    if not windows:
        return Finding(
            d.name, Verdict.NO_DATA, None, None, 0.0, 0, 0, None, 0, gpus, 0, 0, None, 0.0,
            0.0, 0, d.price_per_gpu_hour, None,
            f"{d.name}: no scraped time in the range; nothing to size.",
            step_model=label,
        )  # fmt: skip
    covered = sum(w.covered_s for w in windows)
    idle = 1 - sum(w.busy_s for w in windows) / covered
    idle = min(max(idle, 0.0), 1.0)  # busy_s <= covered_s per window (checked): float noise
    held = max(w.replicas_up for w in windows)

    # the compute basis needs token counters; a deployment without any is sized on busy time
    model = d.step_model
    if model is not None and all(w.generation_tokens is None for w in windows):
        model, note = None, "vLLM's token counters were not scraped"
    else:
        note = d.step_model_note
    # one pass: each window's need, load, measure and saturation
    rated = [(*_rate(w, model, target_utilization, waiting_threshold), w) for w in windows]
    saturated = [w for *_, sat, w in rated if sat]
    peak_need, _, peak_measure, _, peak = max(rated, key=lambda r: (r[0], r[1]))
    compute = (compute_replicas(peak, model) or 0.0) if model is not None else None
    basis = "busy" if model is None else "compute"
    if saturated:
        binding = Binding.SATURATED
    elif peak_need < min_replicas:
        binding = Binding.MINIMUM
    else:
        binding = peak_measure
    peak_need = max(peak_need, min_replicas)
    if saturated:
        verdict, cut = Verdict.ADD_CAPACITY, 0
    elif peak_need < held:
        verdict, cut = Verdict.CUT, (held - peak_need) * gpus
    else:
        verdict, cut = Verdict.RIGHT_SIZED, 0
    price = d.price_per_gpu_hour
    saving = None if price is None else cut * price * HOURS_PER_WEEK
    finding = Finding(
        deployment=d.name,
        verdict=verdict,
        binding=binding,
        idle_share=idle,
        covered_hours=covered / 3600,
        windows=len(windows),
        saturated_windows=len(saturated),
        first_saturated=min((w.start for w in saturated), default=None),
        replicas_held=held,
        gpus_per_replica=gpus,
        gpus_held=held * gpus,
        peak_need_replicas=peak_need,
        peak_start=peak.start,
        peak_busy_replicas=peak.busy_replicas,
        peak_kv_replicas=peak.kv_replicas,
        gpus_to_cut=cut,
        price_per_gpu_hour=price,
        saving_per_week=saving,
        message="",
        basis=basis,
        peak_compute_replicas=compute,
        step_model=label if model is not None else None,
    )
    return _with_message(finding, target_utilization, note)


def share_text(value: float | None) -> str:
    """A share as a whole percent that never rounds to 0 % or 100 % unless it is."""
    if value is None:
        return "?"
    if 0 < value < 0.005:
        return "<1%"
    if 0.995 <= value < 1:
        return ">99%"
    return f"{value:.0%}"


def _replicas(n: int, all_word: str = "") -> str:
    """'its one replica' / 'all its 3 replicas'."""
    if n == 1:
        return "its one replica"
    return f"{all_word} {n} replicas".strip()


def _with_message(f: Finding, target_utilization: float, note: str | None = None) -> Finding:
    """The finding with its one-paragraph message filled in."""
    headroom = f"{1 - target_utilization:.0%} headroom"
    at = f"{f.peak_start:%Y-%m-%d %H:%M} UTC" if f.peak_start else "the peak"
    kv = f"{f.peak_kv_replicas:.2f} replicas' worth of KV cache"
    if f.peak_compute_replicas is not None:
        peak = (
            f"{f.peak_busy_replicas:.2f} busy replicas but {f.peak_compute_replicas:.2f} "
            f"replicas' worth of engine steps at full batch ({f.step_model}) and {kv} at {at}"
        )
    else:
        peak = f"{f.peak_busy_replicas:.2f} busy replicas and {kv} at {at}"
    idle = share_text(f.idle_share)
    if f.verdict is Verdict.ADD_CAPACITY:
        first = f"{f.first_saturated:%Y-%m-%d %H:%M} UTC" if f.first_saturated else "?"
        text = (
            f"{f.deployment} was {idle} idle but saturated: requests waited or were preempted "
            f"in {f.saturated_windows} of {f.windows} windows (first at {first}). Do not cut: "
            f"its peak needed {_replicas(f.replicas_held, 'all its')} and more; add capacity."
        )
    elif f.verdict is Verdict.CUT:
        saving = (
            f": ${f.saving_per_week:,.2f} a week at ${f.price_per_gpu_hour:,.2f}/GPU-hour"
            if f.saving_per_week is not None
            else " (no GPU price: saving unknown)"
        )
        text = (
            f"{f.deployment} was {idle} idle; {f.gpus_to_cut} fewer GPU"
            f"{'s' if f.gpus_to_cut != 1 else ''} "
            f"({f.replicas_held} → {f.peak_need_replicas} replicas of {f.gpus_per_replica} "
            f"GPU{'s' if f.gpus_per_replica > 1 else ''}) would have met the observed peak "
            f"({peak}; {headroom}){saving}."
        )
    elif f.replicas_held <= 1:
        text = (
            f"{f.deployment} was {idle} idle on one replica, the fewest it can run; nothing "
            f"to cut (peak: {peak})."
        )
    else:
        text = (
            f"{f.deployment} was {idle} idle, but its peak needed all {f.replicas_held} "
            f"replicas ({peak}; {headroom}); nothing to cut."
        )
    if f.verdict is Verdict.RIGHT_SIZED and f.peak_need_replicas > f.replicas_held:
        text += (
            f" Its peak ran above the {target_utilization:.0%} target: "
            f"{f.peak_need_replicas} replicas would keep the {headroom}."
        )
    if f.basis == "busy" and f.verdict is not Verdict.ADD_CAPACITY:
        why = note or "no step-time model"
        text += f" Sized on busy time ({why}): replicas that batch their requests may need fewer."
    return replace(f, message=text)


def rightsize_all(deployments: Sequence[Deployment], **options: float | int) -> list[Finding]:
    """:func:`rightsize` for each deployment, largest saving first (then saturated ones)."""
    findings = [rightsize(d, **options) for d in deployments]  # type: ignore[arg-type]
    order = {Verdict.ADD_CAPACITY: 0, Verdict.CUT: 1, Verdict.RIGHT_SIZED: 2, Verdict.NO_DATA: 3}
    return sorted(
        findings, key=lambda f: (order[f.verdict], -(f.saving_per_week or 0), f.deployment)
    )
