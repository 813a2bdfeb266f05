"""Right-sizing a self-hosted deployment from what its replicas did (issue #10, §4 Platform):
"deployment X was 72 % idle; N fewer GPUs would have met the observed peak".

Inputs are per-window figures over the time scrapes covered (sql/queries/rightsizing_windows.sql
builds them from vLLM's gauges and counters, 5-minute windows by default); nothing here reads
the ledger. The method, its headroom and its limits are in docs/efficiency.md
("Right-sizing"):

- **Load of a window**, in replicas: the larger of the *busy replicas* (the replicas' shares of
  covered time with a request running, summed) and the *KV replicas* (their mean KV-cache
  usage, summed). Busy replicas is conservative: two replicas each serving one request all
  window count 2, though one replica would batch both.
- **Need of a window** = load / target utilisation (0.8: 20 % headroom), rounded up.
- **Saturated window**: requests waited (mean waiting requests, summed over the replicas, at
  least WAITING_THRESHOLD) or one was preempted. Its load is demand that did *not* fit, so
  the need there is at least every replica that ran; a deployment with any saturated window
  is never cut ("add capacity").
- **Peak need** = the largest need over the windows, at least ``min_replicas``; the GPUs that
  could go = (replicas held − peak need) x GPUs per replica; the saving a week = those GPUs x
  the range's $/GPU-hour x 168 h.
- **Idle share** = 1 − busy replica-seconds ÷ covered replica-seconds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum

#: A replica is planned to run at most this busy (and this full of KV cache): 20 % headroom.
TARGET_UTILIZATION = 0.8
#: A window is saturated when at least this many requests waited on average over it (the
#: replicas' time-weighted means, summed) or one was preempted. Not any wait at all: a burst
#: caught at a scrape waits a scheduler step or two (tens of ms) on an idle fleet, and a
#: threshold of 0 called every deployment of the demo's week saturated (the batch pool, 91 %
#: idle, in 51 of 2,012 windows with a mean of 0.01 waiting).
WAITING_THRESHOLD = 0.5
#: The windows the load is taken over (sql/queries/rightsizing_windows.sql's $window_s).
WINDOW_S = 300
HOURS_PER_WEEK = 168.0
#: Loads this close above a whole number of replicas round down (float noise, not demand).
_EPS = 1e-9


class Verdict(StrEnum):
    """What a finding recommends."""

    CUT = "cut"  # fewer GPUs would have met the observed peak
    RIGHT_SIZED = "right_sized"  # the peak needed every replica held
    ADD_CAPACITY = "add_capacity"  # requests waited or were preempted: saturated
    NO_DATA = "no_data"  # no scraped time in the range


class Binding(StrEnum):
    """Which measure set the peak need."""

    BUSY = "busy"
    KV = "kv"
    SATURATED = "saturated"
    MINIMUM = "minimum"  # the floor of min_replicas


@dataclass(frozen=True, slots=True)
class Window:
    """One window of one deployment, over the replica time scrapes covered in it.

    ``busy_replicas`` and ``kv_replicas`` are sums over the replicas up in the window of each
    replica's busy share (of its covered time) and mean KV-cache usage (0..1); ``waiting`` is
    the replicas' mean waiting requests, summed; ``busy_s`` and ``covered_s`` are
    replica-seconds (covered: scraped; busy: covered with a request running)."""

    start: datetime
    replicas_up: int
    busy_replicas: float
    kv_replicas: float
    waiting: float
    preemptions: float
    busy_s: float
    covered_s: float

    def __post_init__(self) -> None:
        for name in ("busy_replicas", "kv_replicas", "waiting", "preemptions", "busy_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"window {self.start}: {name} must be >= 0, got {value!r}")
        if self.replicas_up < 0:
            raise ValueError(f"window {self.start}: replicas_up must be >= 0")
        if not (math.isfinite(self.covered_s) and self.covered_s >= self.busy_s - 1e-6):
            raise ValueError(
                f"window {self.start}: busy_s {self.busy_s} exceeds covered_s {self.covered_s}"
            )


@dataclass(frozen=True, slots=True)
class Deployment:
    """A self-hosted deployment over the range: its replicas' GPUs, the range's GPU price
    (None: unpriced) and its windows (those with scraped time)."""

    name: str
    gpus_per_replica: int
    price_per_gpu_hour: float | None
    windows: Sequence[Window]

    def __post_init__(self) -> None:
        if self.gpus_per_replica < 1:
            raise ValueError(f"{self.name}: gpus_per_replica must be >= 1")
        if self.price_per_gpu_hour is not None and not (
            math.isfinite(self.price_per_gpu_hour) and self.price_per_gpu_hour >= 0
        ):
            raise ValueError(f"{self.name}: price_per_gpu_hour must be >= 0")


@dataclass(frozen=True, slots=True)
class Finding:
    """The right-sizing finding of one deployment (see the module docstring)."""

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


def window_need(
    window: Window,
    target_utilization: float = TARGET_UTILIZATION,
    waiting_threshold: float = WAITING_THRESHOLD,
) -> int:
    """Replicas a window needed: its load (busy or KV replicas, the larger) over the target
    utilisation, rounded up; a saturated window needs at least every replica that ran."""
    load = max(window.busy_replicas, window.kv_replicas)
    need = math.ceil(load / target_utilization - _EPS) if load > 0 else 0
    if is_saturated(window, waiting_threshold):
        return max(need, window.replicas_up)
    return need


def is_saturated(window: Window, waiting_threshold: float = WAITING_THRESHOLD) -> bool:
    """Requests waited (mean waiting at least the threshold) or one was preempted."""
    waited = window.waiting > 0 and window.waiting >= waiting_threshold
    return waited or window.preemptions > 0


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
    if not windows:
        return Finding(
            d.name, Verdict.NO_DATA, None, None, 0.0, 0, 0, None, 0, gpus, 0, 0, None, 0.0,
            0.0, 0, d.price_per_gpu_hour, None,
            f"{d.name}: no scraped time in the range; nothing to size.",
        )  # fmt: skip
    covered = sum(w.covered_s for w in windows)
    idle = 1 - sum(w.busy_s for w in windows) / covered
    idle = min(max(idle, 0.0), 1.0)  # busy_s <= covered_s per window (checked): float noise
    held = max(w.replicas_up for w in windows)
    saturated = [w for w in windows if is_saturated(w, waiting_threshold)]

    def need(w: Window) -> int:
        return window_need(w, target_utilization, waiting_threshold)

    peak = max(windows, key=lambda w: (need(w), max(w.busy_replicas, w.kv_replicas)))
    peak_need = need(peak)
    if saturated:
        binding = Binding.SATURATED
    elif peak_need < min_replicas:
        binding = Binding.MINIMUM
    else:
        binding = Binding.BUSY if peak.busy_replicas >= peak.kv_replicas else Binding.KV
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
    )
    return _with_message(finding, target_utilization)


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


def _with_message(f: Finding, target_utilization: float) -> Finding:
    """The finding with its one-paragraph message filled in."""
    headroom = f"{1 - target_utilization:.0%} headroom"
    at = f"{f.peak_start:%Y-%m-%d %H:%M} UTC" if f.peak_start else "the peak"
    peak = (
        f"{f.peak_busy_replicas:.2f} busy replicas and {f.peak_kv_replicas:.2f} replicas' "
        f"worth of KV cache at {at}"
    )
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
            f"{f.deployment} was {idle} idle; {f.gpus_to_cut} fewer GPUs "
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
    return replace(f, message=text)


def rightsize_all(deployments: Sequence[Deployment], **options: float | int) -> list[Finding]:
    """:func:`rightsize` for each deployment, largest saving first (then saturated ones)."""
    findings = [rightsize(d, **options) for d in deployments]  # type: ignore[arg-type]
    order = {Verdict.ADD_CAPACITY: 0, Verdict.CUT: 1, Verdict.RIGHT_SIZED: 2, Verdict.NO_DATA: 3}
    return sorted(
        findings, key=lambda f: (order[f.verdict], -(f.saving_per_week or 0), f.deployment)
    )
