"""Spend forecast to the end of a budget period, with a calibrated P10-P90 band (issue #12).
docs/budget-forecast.md describes the method and its back-tested error.

The point forecast (P50 before correction) of each future hour is ``level × profile(hour)``:

- **profile**: the series' own seasonality. With >= 2 weeks of history, an hour-of-week profile:
  for each of the 168 UTC hours of the week, the median of the last (up to) 4 weeks' values
  at that hour — robust to one odd week. With 1 day to 2 weeks, hour-of-day × day type
  (weekday / weekend), medians over the last (up to) 14 days. Under a day: a flat rate (the
  mean hour). No history: nothing is forecast.
- **level**: actual spend ÷ profile over the last 7 days (or all the history, if shorter), so
  a level shift or a trend since the profile's weeks carries into the forecast.

The band comes from the model's own past errors on this series (no assumed distribution): the
same model is re-run at earlier origins (every 24 h back, up to 56, each with only the history
before it) over the same horizon as the one asked, and the relative errors of the remaining
spend, ``actual / forecast − 1``, give the 10th, 50th and 90th percentiles applied to this
forecast's remaining spend (the median corrects a persistent bias; the outer two are widened
for the number of past errors as split-conformal prediction does). When the history is too
short for 8 such origins, the longest horizon (>= 24 h) that has them is used; with less than
that, an assumed ±50 % band, and ``method`` says so.

Hours are UTC hour buckets (the marts' grain): a period bound that is not on a whole UTC hour
(a +05:30 time zone) counts the hour that starts after it. Pure numpy, deterministic.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import numpy as np

HOUR_S = 3600
WEEK_H = 168
DAY_H = 24
PROFILE_WEEKS = 4  # hour-of-week profile: median of the last this-many weeks
PROFILE_DAYS = 14  # hour-of-day profile: medians over the last this-many days
LEVEL_H = WEEK_H  # the level is fitted on the last week (a whole one: seasonality cancels)
MIN_ORIGINS = 8  # past forecasts needed to read a band off their errors
MAX_ORIGINS = 56  # the most recent this-many (8 weeks of daily origins)
ASSUMED_BAND = (-0.5, 0.0, 0.5)  # relative, when the history cannot be back-tested
QUANTILES = (0.1, 0.5, 0.9)
# 1970-01-01 was a Thursday: epoch hour h is in UTC weekday (h // 24 + 3) % 7 (Monday = 0).
_EPOCH_WEEKDAY = 3


@dataclass(frozen=True)
class SpendForecast:
    """A period's spend so far and forecast totals. ``p10``/``p50``/``p90`` are period totals
    (spent + remaining); ``band`` is the cumulative spend (time, P10, P50, P90) from ``now`` at
    each UTC hour boundary to the period end, for charts. ``exhaustion_at``: when the P50
    path reaches ``amount`` (in the past when already spent; None when not within the
    period); ``days_to_exhaustion`` from now (0 when already exhausted)."""

    spent: float
    p10: float
    p50: float
    p90: float
    burn_rate_per_day: float
    exhaustion_at: datetime | None
    days_to_exhaustion: float | None
    method: str
    band: list[tuple[datetime, float, float, float]] = field(default_factory=list)
    history_hours: int = 0  # whole hours of history before now the model had
    band_origins: int = 0  # past forecasts the band was read from (0: assumed or none)


@dataclass(frozen=True)
class _Series:
    """Dense hourly history: ``x[i]`` is the spend of epoch hour ``h0 + i`` for every whole
    hour before ``now``'s hour ``hn``; ``partial`` is the spend so far in hour ``hn``, a
    fraction ``frac`` of which has passed."""

    x: np.ndarray
    h0: int
    hn: int
    partial: float
    frac: float

    @property
    def n(self) -> int:
        return self.hn - self.h0


def _aware(value: datetime, what: str) -> datetime:
    if not isinstance(value, datetime) or value.utcoffset() is None:
        raise ValueError(f"{what} must be a timezone-aware datetime, got {value!r}")
    return value


def _series(hourly: Sequence[tuple[datetime, float]], now: datetime) -> _Series:
    """Validate and densify the history (missing hours are 0, duplicate hours add up, hours
    starting at or after ``now`` are ignored)."""
    now_s = now.timestamp()
    hn = math.floor(now_s / HOUR_S)
    frac = (now_s - hn * HOUR_S) / HOUR_S
    values: dict[int, float] = {}
    for hour, cost in hourly:
        _aware(hour, "an hour of the history")
        ts = hour.timestamp()
        if ts % HOUR_S:
            raise ValueError(f"hour {hour.isoformat()} does not start on a whole UTC hour")
        try:
            value = float(cost)
        except (TypeError, ValueError):
            raise ValueError(f"cost {cost!r} at hour {hour.isoformat()} is not a number") from None
        if not math.isfinite(value) or value < 0:
            raise ValueError(
                f"cost {cost!r} at hour {hour.isoformat()} is negative or not a finite number"
            )
        if ts >= now_s:
            continue
        h = int(ts // HOUR_S)
        values[h] = values.get(h, 0.0) + value
    h0 = min(values, default=hn)
    x = np.zeros(hn - h0)
    for h, value in values.items():
        if h < hn:
            x[h - h0] = value
    return _Series(x=x, h0=h0, hn=hn, partial=values.get(hn, 0.0), frac=frac)


def _weekend(epoch_hours: np.ndarray) -> np.ndarray:
    return (epoch_hours // DAY_H + _EPOCH_WEEKDAY) % 7 >= 5


def _profile(x: np.ndarray, h0: int, n: int) -> tuple[Callable[[np.ndarray], np.ndarray], str]:
    """The seasonal profile fitted on ``x[:n]``, as a function of array indexes into x."""
    if n >= 2 * WEEK_H:
        weeks = min(PROFILE_WEEKS, n // WEEK_H)
        block = x[n - weeks * WEEK_H : n].reshape(weeks, WEEK_H)
        by_slot = np.median(block, axis=0)  # column j: index n - weeks*168 + j, ≡ (i - n) % 168
        return (
            lambda idx: by_slot[(idx - n) % WEEK_H],
            f"hour-of-week profile (median of {weeks} weeks)",
        )
    days = min(PROFILE_DAYS, n // DAY_H)
    lo = n - days * DAY_H
    epoch = h0 + np.arange(lo, n)
    segment = x[lo:n]
    weekend = _weekend(epoch)
    hod = epoch % DAY_H
    table = np.zeros((2, DAY_H))
    for kind in (0, 1):
        for hour in range(DAY_H):
            at_hour = hod == hour
            values = segment[at_hour & (weekend == bool(kind))]
            if not values.size:  # no such day (hour) yet: the other day type's
                values = segment[at_hour]
            table[kind, hour] = np.median(values)
    return (
        lambda idx: table[_weekend(h0 + idx).astype(int), (h0 + idx) % DAY_H],
        "hour-of-day x weekday/weekend profile",
    )


def predict(x: np.ndarray, h0: int, n: int, horizon: int) -> tuple[np.ndarray, str]:
    """Point forecasts of the ``horizon`` hours after ``x[:n]`` (indexes n .. n+horizon-1)."""
    if n <= 0:
        return np.zeros(horizon), "no history"
    if n < DAY_H:
        return np.full(horizon, float(x[:n].mean())), f"flat rate of {n} h"
    profile, method = _profile(x, h0, n)
    window = min(LEVEL_H, n)
    fitted = float(profile(np.arange(n - window, n)).sum())
    actual = float(x[n - window : n].sum())
    if fitted > 0:
        level = actual / fitted
        return level * profile(np.arange(n, n + horizon)), f"{method} x level of last {window} h"
    # The profile's weeks had no spend but the last week had some: a new scope starting.
    return np.full(horizon, actual / window), f"flat rate of last {window} h"


def _past_errors(x: np.ndarray, h0: int, n: int, horizon: int) -> tuple[np.ndarray, int]:
    """Relative errors (actual / forecast − 1) of the remaining spend of past forecasts made
    by the same model, and the horizon they cover. Origins every 24 h back from the latest
    whose horizon is fully known, each with at least the history the current regime needs
    (2 weeks, else 1 day). Too few for the asked horizon: the longest shorter one (>= 24 h)
    that has enough; still too few: an empty array."""
    need_options = [2 * WEEK_H, DAY_H] if n >= 2 * WEEK_H else [DAY_H]
    for need in need_options:
        longest = n - need - DAY_H * (MIN_ORIGINS - 1)
        for h in (horizon, min(horizon, longest)):
            if h < 1 or (h < horizon and h < DAY_H):
                continue
            origins = list(range(n - h, need - 1, -DAY_H))[:MAX_ORIGINS]
            if len(origins) < MIN_ORIGINS:
                continue
            errors = []
            for origin in origins:
                forecast = float(predict(x, h0, origin, h)[0].sum())
                actual = float(x[origin : origin + h].sum())
                if forecast > 0:
                    errors.append(actual / forecast - 1.0)
                elif actual == 0:
                    errors.append(0.0)
            if len(errors) >= MIN_ORIGINS:
                return np.asarray(errors), h
    return np.empty(0), 0


def _band_quantiles(errors: np.ndarray) -> tuple[float, float, float]:
    """The 10th, 50th and 90th percentiles of the past errors, the outer two widened for the
    sample size as split-conformal prediction does (the ((n + 1) × 0.9)-th of n errors): a
    handful of past errors understates the spread of the next one."""
    n = errors.size
    upper = min(1.0, QUANTILES[2] * (n + 1) / n)
    lo, mid, hi = np.quantile(errors, (1.0 - upper, QUANTILES[1], upper))
    return float(lo), float(mid), float(hi)


def _spent(series: _Series, start_s: float, end_s: float) -> float:
    """Spend of the hours that start in [start_s, end_s) (the current hour's partial value
    counts when it starts there)."""
    lo = max(math.ceil(start_s / HOUR_S) - series.h0, 0)
    hi = min(math.ceil(end_s / HOUR_S) - series.h0, series.n)
    total = float(series.x[lo:hi].sum()) if hi > lo else 0.0
    if start_s <= series.hn * HOUR_S < end_s:
        total += series.partial
    return float(total)


def _window_spend(series: _Series, lo_s: float, hi_s: float) -> float:
    """Spend in [lo_s, hi_s) with each hour's spend spread evenly over the part of it that has
    passed (the current hour's value covers its elapsed fraction only)."""
    total = 0.0
    first = max(math.floor(lo_s / HOUR_S), series.h0)
    last = min(math.ceil(hi_s / HOUR_S), series.hn + 1)
    for h in range(first, last):
        start = h * HOUR_S
        covered = HOUR_S if h < series.hn else series.frac * HOUR_S
        if covered <= 0:
            continue
        overlap = min(hi_s, start + covered) - max(lo_s, start)
        if overlap > 0:
            value = series.x[h - series.h0] if h < series.hn else series.partial
            total += value * overlap / covered
    return total


def _burn_rate(series: _Series, start_s: float, ref_s: float) -> float:
    """Spend per day over the last 24 h before ``ref_s``, or since the period start when that
    is shorter (but at least an hour: a period that just began uses the last 24 h)."""
    lo = max(start_s, ref_s - DAY_H * HOUR_S)
    if ref_s - lo < HOUR_S:
        lo = ref_s - DAY_H * HOUR_S
    return float(_window_spend(series, lo, ref_s) * 86400 / (ref_s - lo))


def _past_crossing(series: _Series, start_s: float, end_s: float, amount: float) -> datetime:
    """When the actual cumulative spend of the period reached ``amount`` (linear in the hour)."""
    cumulative = 0.0
    first = max(math.ceil(start_s / HOUR_S), series.h0)
    for h in range(first, min(math.ceil(end_s / HOUR_S), series.hn + 1)):
        value = series.x[h - series.h0] if h < series.hn else series.partial
        span = HOUR_S if h < series.hn else series.frac * HOUR_S
        if value > 0 and cumulative + value >= amount:
            at = h * HOUR_S + span * (amount - cumulative) / value
            return datetime.fromtimestamp(at, UTC)
        cumulative += value
    return datetime.fromtimestamp(min(end_s, series.hn * HOUR_S + series.frac * HOUR_S), UTC)


def forecast_period(
    hourly: Sequence[tuple[datetime, float]],
    period_start: datetime,
    period_end: datetime,
    now: datetime,
    *,
    amount: float | None = None,
) -> SpendForecast:
    """Forecast the spend of the period [period_start, period_end) at ``now`` from ``hourly``:
    (hour start, spend) for every hour of the history the caller has (missing hours are 0;
    the hour containing ``now`` is its partial spend so far; hours from ``now`` on are
    ignored). All datetimes timezone-aware. ``amount``: the budget, for the exhaustion date.

    Raises ValueError for a negative, NaN or infinite cost (naming its hour), an hour not on a
    whole UTC hour, naive datetimes, an empty period or a non-positive amount. A period that
    is over returns its actual spend as P10 = P50 = P90; one that has not started yet is
    forecast whole."""
    for value, what in ((period_start, "period_start"), (period_end, "period_end"), (now, "now")):
        _aware(value, what)
    if period_end <= period_start:
        raise ValueError(
            f"period_end {period_end.isoformat()} is not after period_start "
            f"{period_start.isoformat()}"
        )
    if amount is not None and not (math.isfinite(amount) and amount > 0):
        raise ValueError(f"amount {amount!r} must be a positive number")
    series = _series(hourly, now)
    start_s, end_s, now_s = period_start.timestamp(), period_end.timestamp(), now.timestamp()
    spent = _spent(series, start_s, min(now_s, end_s))
    burn = _burn_rate(series, start_s, min(now_s, end_s))

    if now_s >= end_s:
        crossing = None
        if amount is not None and spent >= amount:
            crossing = _past_crossing(series, start_s, end_s, amount)
        return SpendForecast(
            spent=spent,
            p10=spent,
            p50=spent,
            p90=spent,
            burn_rate_per_day=burn,
            exhaustion_at=crossing,
            days_to_exhaustion=None if crossing is None else 0.0,
            method="period over: actual spend",
            history_hours=series.n,
        )

    # Future hours hn .. last, each weighted by the part of it still to come within the period.
    first_s = max(now_s, start_s)
    last_h = math.ceil(end_s / HOUR_S) - 1
    hours = np.arange(series.hn, last_h + 1)
    lo = np.maximum(hours * HOUR_S, first_s)
    hi = np.minimum((hours + 1) * HOUR_S, end_s)
    weights = np.clip(hi - lo, 0, None) / HOUR_S
    if series.n == 0:
        rate = series.partial / series.frac if series.partial > 0 and series.frac > 0 else 0.0
        point = np.full(hours.size, rate)
        method = "flat rate of the current hour" if rate else "no history"
    else:
        point, method = predict(series.x, series.h0, series.n, hours.size)
    remaining = point * weights
    total = float(remaining.sum())

    origins = 0
    if total <= 0:
        quantiles = (0.0, 0.0, 0.0)
    else:
        errors, horizon = _past_errors(
            series.x, series.h0, series.n, max(1, round(float(weights.sum())))
        )
        if errors.size:
            quantiles = _band_quantiles(errors)
            origins = int(errors.size)
            method += f"; band from {origins} back-tested {horizon}-h forecasts"
        else:
            quantiles = ASSUMED_BAND
            method += "; assumed ±50 % band (too little history to back-test)"
    q10, q50, q90 = (max(q, -1.0) for q in quantiles)
    q50 = min(max(q50, q10), q90)

    # The band at now, at each hour boundary after it and at the period end.
    cumulative = np.concatenate([[0.0], np.cumsum(remaining)])
    times = np.concatenate([[first_s], hi])
    band = [
        (
            datetime.fromtimestamp(float(t), UTC),
            float(spent + c * (1 + q10)),
            float(spent + c * (1 + q50)),
            float(spent + c * (1 + q90)),
        )
        for t, c in zip(times, cumulative, strict=True)
    ]
    p10, p50, p90 = band[-1][1], band[-1][2], band[-1][3]

    exhaustion_at: datetime | None = None
    days: float | None = None
    if amount is not None:
        if spent >= amount:
            exhaustion_at, days = _past_crossing(series, start_s, end_s, amount), 0.0
        else:
            for (t0, _, a, _), (t1, _, b, _) in itertools.pairwise(band):
                if b >= amount > a:
                    exhaustion_at = t0 + (t1 - t0) * ((amount - a) / (b - a))
                    days = (exhaustion_at - now) / timedelta(days=1)
                    break
    return SpendForecast(
        spent=spent,
        p10=p10,
        p50=p50,
        p90=p90,
        burn_rate_per_day=burn,
        exhaustion_at=exhaustion_at,
        days_to_exhaustion=days,
        method=method,
        band=band,
        history_hours=series.n,
        band_origins=origins,
    )


def history_start(period_start: datetime, period_end: datetime) -> datetime:
    """How far back a caller should read the hourly spend for a full-quality forecast of this
    period at any time in it: the profile's 2 weeks before the earliest band origin, and the
    :data:`MAX_ORIGINS` daily origins before a whole period's horizon (14 + 56 days + the
    period's length before its start, about 100 days for a month). Less history still
    forecasts, with fewer past errors behind the band."""
    length = period_end - period_start
    return period_start - length - timedelta(hours=2 * WEEK_H + DAY_H * (MAX_ORIGINS - 1))


def straight_line(
    hourly: Sequence[tuple[datetime, float]],
    period_start: datetime,
    period_end: datetime,
    now: datetime,
) -> float:
    """The naive projection the benchmark compares with: spent so far ÷ the elapsed fraction
    of the period (the spend so far when nothing has elapsed, the actual once it is over)."""
    for value, what in ((period_start, "period_start"), (period_end, "period_end"), (now, "now")):
        _aware(value, what)
    if period_end <= period_start:
        raise ValueError("period_end is not after period_start")
    series = _series(hourly, now)
    start_s, end_s, now_s = period_start.timestamp(), period_end.timestamp(), now.timestamp()
    spent = _spent(series, start_s, min(now_s, end_s))
    elapsed = (min(now_s, end_s) - start_s) / (end_s - start_s)
    return spent / elapsed if elapsed > 0 else spent
