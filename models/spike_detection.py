"""Spend spikes (issue #12, the ``spend_spike`` alert kind): an hour's spend against the same
hour of the week over recent weeks. Pure; docs/alert-lifecycle.md ("Spend spikes").

Why not a flat average: inference spend has a daily shape (business hours) and a weekly one
(weekends), so a Monday 10:00 that costs three times the week's hourly mean is normal and a
Sunday 03:00 that costs as much as a weekday noon is not. The baseline of hour *h* is the
spend of the hours exactly 7·k days before *h* (k = 1 … ``weeks``), those present; its
median (robust to one earlier spike among them) and MAD (median absolute deviation).

The alert value is :func:`spike_ratio`, ``value / max(median, min_baseline)``: how many
times the usual spend this hour costs. ``min_baseline`` (in the budget currency per hour)
keeps scopes that usually cost cents from alerting on a few cents more: below it the ratio
is taken against ``min_baseline`` instead, so the value must also be large in absolute terms.

Defaults (:data:`DEFAULT_THRESHOLD` …) were tuned on bench/spike_detection.py's tuning seeds
and checked on its held-out seeds: precision and recall >= 0.9 and at most one false alert
per scope per week on injected 2-6x spikes of 1-4 h over daily and weekly seasonality, trend
and 10-20 % noise, evaluated hourly through models/alert_lifecycle.py.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

#: Alert when an hour costs at least this many times its baseline (the rule's threshold).
DEFAULT_THRESHOLD = 2.0
#: Resolve once the ratio is below this (the rule's resolve_threshold) for DEFAULT_RESOLVE_S.
DEFAULT_RESOLVE_THRESHOLD = 1.3
#: Hourly data: a spike of one hour fires at once (pending_s 0) ...
DEFAULT_PENDING_S = 0
#: ... and an alert resolves after one more hour below the resolve threshold, so a spike
#: with one quieter hour in the middle stays one alert.
DEFAULT_RESOLVE_S = 3600
#: Weeks of history in the baseline, and the fewest present for a value (fewer: no data).
DEFAULT_WEEKS = 4
DEFAULT_MIN_WEEKS = 2
#: The floor of the baseline, per hour, in the budget currency.
DEFAULT_MIN_BASELINE = 1.0

#: MAD x 1.4826 estimates the standard deviation of normal data.
MAD_TO_SIGMA = 1.4826

_HOUR = timedelta(hours=1)
_WEEK = timedelta(days=7)


@dataclass(frozen=True)
class Baseline:
    """The same hour of the week over recent weeks: ``values`` oldest first; ``median`` and
    ``mad`` None when no week is present."""

    median: float | None
    mad: float | None
    n_weeks: int
    values: tuple[float, ...]


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[mid]
    return (ordered[mid - 1] + ordered[mid]) / 2


def _hour_utc(at: datetime, name: str) -> datetime:
    if at.tzinfo is None or at.utcoffset() is None:
        raise ValueError(f"{name} must be a timezone-aware datetime, got naive {at.isoformat()}")
    return at.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def hourly_index(hourly: Sequence[tuple[datetime, float]]) -> dict[datetime, float]:
    """``{hour start (UTC): value}`` of an hourly series; raises ValueError on a naive time,
    a non-finite or negative value, or two values for one hour."""
    out: dict[datetime, float] = {}
    for stamp, value in hourly:
        hour = _hour_utc(stamp, "an hourly series' time")
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"hour {hour.isoformat()}: spend must be finite and >= 0, got {value}")
        if hour in out:
            raise ValueError(f"hour {hour.isoformat()} appears twice in the hourly series")
        out[hour] = float(value)
    return out


def same_hour_of_week_baseline(
    hourly: Sequence[tuple[datetime, float]] | dict[datetime, float],
    at: datetime,
    *,
    weeks: int = DEFAULT_WEEKS,
) -> Baseline:
    """The baseline of the hour containing ``at`` (timezone-aware): the values of the hours
    exactly 7·k days earlier, k = 1 … ``weeks``, that are present in ``hourly`` (``(hour
    start, value)`` pairs, or an :func:`hourly_index` dict to reuse across many hours). An
    absent hour is left out, not taken as zero: fill zeros first where no row means no spend.
    """
    if weeks < 1:
        raise ValueError(f"weeks must be >= 1, got {weeks}")
    index = hourly if isinstance(hourly, dict) else hourly_index(hourly)
    hour = _hour_utc(at, "the baseline's hour")
    values = tuple(index[h] for k in range(weeks, 0, -1) if (h := hour - k * _WEEK) in index)
    if not values:
        return Baseline(None, None, 0, ())
    median = _median(values)
    mad = _median([abs(v - median) for v in values])
    return Baseline(median, mad, len(values), values)


def spike_ratio(value: float, baseline: Baseline, *, min_baseline: float) -> float:
    """``value / max(baseline median, min_baseline)``: 1 is a usual hour, 3 costs three times
    the usual. An empty baseline counts as 0 (so the ratio is ``value / min_baseline``); a
    caller that wants no value without history checks ``baseline.n_weeks`` first."""
    if not (math.isfinite(min_baseline) and min_baseline > 0):
        raise ValueError(f"min_baseline must be a finite number > 0, got {min_baseline}")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"spend must be finite and >= 0, got {value}")
    return value / max(baseline.median or 0.0, min_baseline)


def robust_z(value: float, baseline: Baseline, *, min_scale: float) -> float:
    """How many robust standard deviations (MAD x 1.4826, at least ``min_scale``) the value
    is above the baseline median: for a caller that wants the spread as well as the level
    (few weeks make MAD noisy, hence the floor). An empty baseline raises ValueError."""
    if not (math.isfinite(min_scale) and min_scale > 0):
        raise ValueError(f"min_scale must be a finite number > 0, got {min_scale}")
    if baseline.median is None or baseline.mad is None:
        raise ValueError("robust_z needs a baseline with at least one week")
    return (value - baseline.median) / max(MAD_TO_SIGMA * baseline.mad, min_scale)
