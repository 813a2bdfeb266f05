"""The capacity planner's traffic forecast (issue #13): each app's hourly requests 13 weeks
ahead with a P10-P90 band, the replicas they need hour by hour, and the back-test that says how
good the forecast is. docs/capacity-planner.md describes it with its back-tested error.

The point forecast extends the budget forecast's (models/spend_forecast.py, issue #12; its
``predict`` is reused, not copied): ``level × profile(hour)`` -- an hour-of-week profile (the
median of the last 4 weeks at each of the 168 hours; with 1 day to 2 weeks of history,
hour-of-day × weekday/weekend) scaled to the last week's level -- then, on top:

- **trend**: with >= 3 whole weeks of history, the Theil-Sen slope of the log weekly totals over
  the last (up to) 8 weeks (the median of the pairwise slopes: robust to one burst week), as
  growth per week, **damped** (× 0.9 per week ahead: a slope read off a few weeks is not
  projected for a quarter undiminished), applied from the middle of the level's week;
- **growth knob**: ``growth_per_month`` compounding monthly (730 h) on top of the trend
  (0.10 = +10 %/month), a planner's what-if multiplying every quantile.

The band comes from the model's own past errors on this series, at the same lead: the same
forecast is re-made at earlier origins (every 24 h back, up to 56, each with only the history
before it, at least 2 weeks of it -- 1 day when the history is shorter) and its errors are
grouped by lead week. Hourly counts mix Poisson noise (spread ~ sqrt(rate)) with multiplicative
noise (bursts, level shifts: spread ~ rate), so each error is normalised by
``sqrt(f + c²f² + 1)`` (f the forecast, c² read off the same errors by moments), and the 10th,
50th and 90th percentiles of the normalised errors of a lead week give that week's band (the
median corrects a persistent bias). Lead weeks without >= 8 past origins reuse the longest lead
week that has them (``method`` says up to which). Fewer origins than that: an assumed ±50 %
band, and ``method`` says so.

Hours are UTC hour buckets; hourly counts are requests per hour. Pure numpy, deterministic.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from inferledger.core.errors import BadInputError
from models.spend_forecast import (
    ASSUMED_BAND,
    DAY_H,
    HOUR_S,
    MAX_ORIGINS,
    MIN_ORIGINS,
    QUANTILES,
    WEEK_H,
    predict,
)

HOURS_PER_MONTH = 730.0
MAX_WEEKS = 104  # the longest horizon asked of forecast_traffic
TREND_MIN_WEEKS = 3  # whole weeks of history before a trend is read
TREND_WEEKS = 8  # the trend is the slope of the last (up to) this many weekly totals
TREND_DAMPING = 0.9  # per week ahead
BAND_HISTORY_H = 2 * WEEK_H  # each past origin's history (the hour-of-week regime's minimum)


@dataclass(frozen=True, eq=False)
class TrafficForecast:
    """Hourly requests from ``start`` (Unix seconds, a whole UTC hour: the hour after the
    history), one value per hour, at P10/P50/P90. ``method`` says how, honestly (the band's
    source included). ``band_origins``: past forecasts the band's first lead week was read from
    (0: assumed or none); ``trend_per_week``: the damped trend's initial growth per week."""

    start: float
    p10: np.ndarray
    p50: np.ndarray
    p90: np.ndarray
    method: str
    history_hours: int = 0
    band_origins: int = 0
    trend_per_week: float = 0.0
    growth_per_month: float = 0.0

    def to_dict(self) -> dict[str, object]:
        """JSON-safe; hourly values rounded to 0.1 request (2,184 hours stay small)."""
        return {
            "start": float(self.start),
            "hours": len(self.p50),
            "method": self.method,
            "history_hours": int(self.history_hours),
            "band_origins": int(self.band_origins),
            "trend_per_week": round(float(self.trend_per_week), 6),
            "growth_per_month": float(self.growth_per_month),
            "p10": _rounded(self.p10),
            "p50": _rounded(self.p50),
            "p90": _rounded(self.p90),
        }


def _rounded(values: np.ndarray) -> list[float]:
    return [round(float(v), 1) for v in values]


def _check_history(history: Sequence[float] | np.ndarray, history_start: float) -> np.ndarray:
    try:
        x = np.asarray(history, dtype=float).reshape(-1)
    except (TypeError, ValueError):
        raise BadInputError("history: hourly request counts must be numbers") from None
    if x.size and not (np.isfinite(x).all() and (x >= 0).all()):
        raise BadInputError("history: hourly request counts must be finite and >= 0")
    if not math.isfinite(history_start) or history_start % HOUR_S:
        raise BadInputError(
            f"history_start: {history_start!r} is not a whole UTC hour in Unix seconds"
        )
    return x


def _trend(x: np.ndarray, n: int) -> float:
    """Log growth per week: the Theil-Sen slope of log weekly totals over the last (up to)
    TREND_WEEKS whole weeks before n; 0 with fewer than TREND_MIN_WEEKS or an empty week."""
    weeks = min(n // WEEK_H, TREND_WEEKS)
    if weeks < TREND_MIN_WEEKS:
        return 0.0
    totals = x[n - weeks * WEEK_H : n].reshape(weeks, WEEK_H).sum(axis=1)
    if (totals <= 0).any():
        return 0.0
    y = np.log(totals)
    i, j = np.triu_indices(weeks, k=1)
    return float(np.median((y[j] - y[i]) / (j - i)))


def _damped(lead_weeks: np.ndarray) -> np.ndarray:
    """Weeks of trend applied at each lead: sum of 0.9^k, continuous in the lead."""
    phi = TREND_DAMPING
    return phi * (1 - phi**lead_weeks) / (1 - phi)


def _point(x: np.ndarray, h0: int, n: int, horizon: int) -> tuple[np.ndarray, str, float]:
    """Point forecasts of the ``horizon`` hours after ``x[:n]``, the method, the log trend."""
    base, method = predict(x, h0, n, horizon)
    slope = _trend(x, n)
    if slope:
        window = min(WEEK_H, n)  # the level's window (spend_forecast.LEVEL_H)
        lead = (np.arange(horizon) + 0.5 + window / 2) / WEEK_H
        base = base * np.exp(slope * _damped(lead))
        method += f" x damped trend ({math.expm1(slope):+.1%}/week, Theil-Sen)"
    return base, method, slope


def _sigma(f: np.ndarray, c2: float) -> np.ndarray:
    """The scale an hour's error is normalised by: Poisson plus multiplicative noise."""
    return np.sqrt(f + c2 * f * f + 1.0)


@dataclass(frozen=True)
class _Band:
    """Normalised-error quantiles per lead week (row w: 10th, 50th, 90th), the c² they were
    normalised with, and the origins behind the first lead week."""

    quantiles: np.ndarray
    c2: float
    origins: int


def _band(x: np.ndarray, h0: int, n: int, horizon: int) -> _Band | None:
    """Past forecasts' errors, by lead week; None when too few past origins."""
    needs = [BAND_HISTORY_H, DAY_H] if n >= BAND_HISTORY_H else [DAY_H]
    for need in needs:
        origins = list(range(n - DAY_H, need - 1, -DAY_H))[:MAX_ORIGINS]
        if len(origins) < MIN_ORIGINS:
            continue
        fs, acts, leads = [], [], []
        for o in origins:
            h = min(horizon, n - o)
            fs.append(_point(x, h0, o, h)[0])
            acts.append(x[o : o + h])
            leads.append(np.arange(h) // WEEK_H)
        f, a, lead = np.concatenate(fs), np.concatenate(acts), np.concatenate(leads)
        square = float((f * f).sum())
        c2 = max(0.0, float(((a - f) ** 2 - f).sum()) / square) if square > 0 else 0.0
        z = (a - f) / _sigma(f, c2)
        # origins per lead week: an origin reaches lead week w when it has > w*168 h of actuals
        reach = np.array([min(horizon, n - o) for o in origins])
        rows = []
        for w in range(-(-horizon // WEEK_H)):
            if int((reach > w * WEEK_H).sum()) < MIN_ORIGINS:
                break
            rows.append(np.quantile(z[lead == w], QUANTILES))
        if rows:
            return _Band(np.asarray(rows), c2, int((reach > 0).sum()))
    return None


def _forecast(
    x: np.ndarray, h0: int, n: int, horizon: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, str, int, float]:
    """P10, P50, P90 of the ``horizon`` hours after ``x[:n]`` (no growth knob), the method,
    the band's origins and the log trend."""
    if n <= 0:
        zeros = np.zeros(horizon)
        return zeros, zeros, zeros, "no history: nothing forecast", 0, 0.0
    f, method, slope = _point(x, h0, n, horizon)
    band = _band(x, h0, n, horizon) if f.any() else None
    if band is None:
        lo, mid, hi = (f * (1 + q) for q in ASSUMED_BAND)
        if f.any():
            method += "; assumed ±50 % band (too little history to back-test)"
        return lo, mid, hi, method, 0, slope
    weeks = len(band.quantiles)
    q = band.quantiles[np.minimum(np.arange(horizon) // WEEK_H, weeks - 1)]
    sigma = _sigma(f, band.c2)
    mid = np.maximum(f + q[:, 1] * sigma, 0.0)
    lo = np.minimum(np.maximum(f + q[:, 0] * sigma, 0.0), mid)
    hi = np.maximum(f + q[:, 2] * sigma, mid)
    total_weeks = -(-horizon // WEEK_H)
    held = f", held beyond week {weeks}" if weeks < total_weeks else ""
    method += (
        f"; band from {band.origins} past origins' errors at the same lead "
        f"(lead weeks 1-{weeks}{held})"
    )
    return lo, mid, hi, method, band.origins, slope


def forecast_traffic(
    history: Sequence[float] | np.ndarray,
    history_start: float,
    *,
    weeks: int = 13,
    growth_per_month: float = 0.0,
) -> TrafficForecast:
    """Forecast the ``weeks`` × 168 hours after ``history`` (hourly request counts, oldest
    first, from ``history_start``: Unix seconds of a whole UTC hour). ``growth_per_month``:
    compounding growth per 730 h on top of the trend (0.10 = +10 %/month; > -1).

    Raises BadInputError for a negative or non-finite count, a start off the hour, weeks
    outside 1..104 or growth <= -100 %. No history forecasts zeros (``method`` says so)."""
    x = _check_history(history, history_start)
    if not isinstance(weeks, int) or not 1 <= weeks <= MAX_WEEKS:
        raise BadInputError(f"weeks: must be a whole number from 1 to {MAX_WEEKS}, got {weeks!r}")
    if not (math.isfinite(growth_per_month) and growth_per_month > -1):
        raise BadInputError(
            f"growth_per_month: must be a number above -1 (-100 %), got {growth_per_month!r}"
        )
    horizon = weeks * WEEK_H
    h0 = int(history_start // HOUR_S)
    lo, mid, hi, method, origins, slope = _forecast(x, h0, x.size, horizon)
    if growth_per_month:
        factor = (1 + growth_per_month) ** ((np.arange(horizon) + 0.5) / HOURS_PER_MONTH)
        lo, mid, hi = lo * factor, mid * factor, hi * factor
        method += f"; growth knob {growth_per_month:+.1%}/month compounding"
    return TrafficForecast(
        start=float(history_start + x.size * HOUR_S),
        p10=lo,
        p50=mid,
        p90=hi,
        method=method,
        history_hours=int(x.size),
        band_origins=origins,
        trend_per_week=math.expm1(slope),
        growth_per_month=float(growth_per_month),
    )


@dataclass(frozen=True, eq=False)
class ReplicaSchedule:
    """A pool's replicas hour by hour under a forecast, beside the static plan.

    replicas / replicas_p10 / replicas_p90: hourly replicas a perfect autoscaler would run for
    the P50 / P10 / P90 traffic, ceil(rate / knee), never below 1 (a pool is never scaled to
    zero: a cold start would break the first request's TTFT SLO). autoscaler_gpu_hours /
    autoscaler_cost: per month (P10, P50, P90), the horizon's average scaled to
    ``hours_per_month``; static_*: ``static_replicas`` the whole month. peak_hour_p90 (index
    from ``start``) / peak_replicas_p90: the P90 traffic's busiest hour; hours_short_p90: hours
    whose P90 traffic needs more replicas than the static plan has."""

    knee_rate: float
    gpus_per_replica: int
    price_per_gpu_hour: float
    hours_per_month: float
    static_replicas: int
    replicas: np.ndarray
    replicas_p10: np.ndarray
    replicas_p90: np.ndarray
    autoscaler_gpu_hours: tuple[float, float, float]
    autoscaler_cost: tuple[float, float, float]
    static_gpu_hours: float
    static_cost: float
    peak_hour_p90: int
    peak_replicas_p90: int
    hours_short_p90: int
    start: float | None = None

    def to_dict(self) -> dict[str, object]:
        """JSON-safe: the hourly P50 replicas as ints, the rest as figures (no ``start`` key
        when the schedule was not given one)."""
        out: dict[str, object] = {} if self.start is None else {"start": float(self.start)}
        gh, cost = self.autoscaler_gpu_hours, self.autoscaler_cost
        out.update(
            {
                "hours": len(self.replicas),
                "knee_rate": float(self.knee_rate),
                "gpus_per_replica": int(self.gpus_per_replica),
                "price_per_gpu_hour": float(self.price_per_gpu_hour),
                "hours_per_month": float(self.hours_per_month),
                "replicas": [int(r) for r in self.replicas],
                "autoscaler": {
                    "gpu_hours_per_month": dict(zip(("p10", "p50", "p90"), _r(gh, 1), strict=True)),
                    "monthly_cost": dict(zip(("p10", "p50", "p90"), _r(cost, 2), strict=True)),
                    "min_replicas": int(self.replicas.min()),
                    "max_replicas": int(self.replicas.max()),
                },
                "static": {
                    "replicas": int(self.static_replicas),
                    "gpu_hours_per_month": round(float(self.static_gpu_hours), 1),
                    "monthly_cost": round(float(self.static_cost), 2),
                },
                "peak_p90": {"hour": int(self.peak_hour_p90), "replicas": self.peak_replicas_p90},
                "hours_short_p90": int(self.hours_short_p90),
            }
        )
        return out


def _r(values: Sequence[float], digits: int) -> list[float]:
    return [round(float(v), digits) for v in values]


def _whole(value: object, name: str) -> int:
    """A count >= 1 (an int, or a float or numpy integer holding one)."""
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer):
        raise BadInputError(f"{name}: must be a whole number >= 1, got {value!r}")
    if not (math.isfinite(value) and int(value) == value and value >= 1):
        raise BadInputError(f"{name}: must be a whole number >= 1, got {value!r}")
    return int(value)


def _replicas(rate: np.ndarray, knee_rate: float) -> np.ndarray:
    # 1e-9: a rate exactly at n knees needs n replicas, not n + 1 from rounding
    need = np.ceil(rate / HOUR_S / knee_rate - 1e-9)
    return np.maximum(need, 1).astype(np.int64)


def replica_schedule(
    rate_p10: np.ndarray | Sequence[float],
    rate_p50: np.ndarray | Sequence[float],
    rate_p90: np.ndarray | Sequence[float],
    knee_rate: float,
    gpus_per_replica: int,
    price_per_gpu_hour: float,
    static_replicas: int,
    *,
    hours_per_month: float = HOURS_PER_MONTH,
    start: float | None = None,
) -> ReplicaSchedule:
    """Replicas over time for hourly requests at P10/P50/P90 (equal lengths), at ``knee_rate``
    requests/s per replica, and what they cost per month beside ``static_replicas`` kept up
    all the time. The perfect autoscaler costs no more than the static plan whenever the
    static plan covers every hour's need (static_replicas >= the hourly maximum).

    Raises BadInputError for empty or unequal series, negative or non-finite rates, a knee
    <= 0, fewer than 1 GPU per replica or static replica, or a negative price."""
    rates = []
    for name, values in (("rate_p10", rate_p10), ("rate_p50", rate_p50), ("rate_p90", rate_p90)):
        r = np.asarray(values, dtype=float).reshape(-1)
        if not r.size or not (np.isfinite(r).all() and (r >= 0).all()):
            raise BadInputError(f"{name}: needs hourly requests, finite and >= 0")
        rates.append(r)
    if len({r.size for r in rates}) != 1:
        raise BadInputError("rate_p10, rate_p50, rate_p90: need the same number of hours")
    if not (math.isfinite(knee_rate) and knee_rate > 0):
        raise BadInputError(f"knee_rate: must be > 0 requests/s per replica, got {knee_rate!r}")
    gpus = _whole(gpus_per_replica, "gpus_per_replica")
    if not (math.isfinite(price_per_gpu_hour) and price_per_gpu_hour >= 0):
        raise BadInputError(f"price_per_gpu_hour: must be >= 0, got {price_per_gpu_hour!r}")
    static = _whole(static_replicas, "static_replicas")
    if not (math.isfinite(hours_per_month) and hours_per_month > 0):
        raise BadInputError(f"hours_per_month: must be > 0, got {hours_per_month!r}")
    low, mid, high = (_replicas(r, knee_rate) for r in rates)
    lo_h, mid_h, hi_h = (float(r.mean()) * gpus * hours_per_month for r in (low, mid, high))
    static_gpu_hours = static * gpus * hours_per_month
    peak = int(np.argmax(high))
    return ReplicaSchedule(
        knee_rate=float(knee_rate),
        gpus_per_replica=gpus,
        price_per_gpu_hour=float(price_per_gpu_hour),
        hours_per_month=float(hours_per_month),
        static_replicas=static,
        replicas=mid,
        replicas_p10=low,
        replicas_p90=high,
        autoscaler_gpu_hours=(lo_h, mid_h, hi_h),
        autoscaler_cost=(
            lo_h * price_per_gpu_hour,
            mid_h * price_per_gpu_hour,
            hi_h * price_per_gpu_hour,
        ),
        static_gpu_hours=static_gpu_hours,
        static_cost=static_gpu_hours * price_per_gpu_hour,
        peak_hour_p90=peak,
        peak_replicas_p90=int(high[peak]),
        hours_short_p90=int((high > static).sum()),
        start=start,
    )


@dataclass(frozen=True)
class Backtest:
    """A rolling-origin back-test of forecast_traffic.

    mase: the mean over origins of the P50's mean absolute error over the horizon divided by
        the in-sample mean absolute error of the seasonal-naive forecast (same hour last week)
        on the history before that origin (Hyndman's MASE; < 1: better than seasonal-naive).
    relative_mae: the P50's MAE / the seasonal-naive forecast's (the last week repeated) MAE
        over the same held-out hours.
    coverage: the share of held-out hours whose actual lies within [P10, P90] (target 0.8).
    method: the latest origin's forecast method.
    """

    mase: float
    relative_mae: float
    coverage: float
    origins: int
    hours: int
    horizon_h: int
    method: str

    def to_dict(self) -> dict[str, object]:
        return {
            "mase": self.mase,
            "relative_mae": self.relative_mae,
            "coverage": self.coverage,
            "origins": self.origins,
            "hours": self.hours,
            "horizon_h": self.horizon_h,
            "method": self.method,
        }


def backtest(
    history: Sequence[float] | np.ndarray,
    history_start: float,
    *,
    horizon_h: int = WEEK_H,
    origins: int = 28,
    step_h: int = DAY_H,
) -> Backtest:
    """Re-forecast ``horizon_h`` hours at ``origins`` past origins, ``step_h`` apart, the
    latest ``horizon_h`` before the history ends, each with only the history before it (at
    least 2 weeks: the seasonal-naive scale needs one, the profile two) and its own band; score
    them against what happened (the class docstring). Raises BadInputError when no origin fits."""
    x = _check_history(history, history_start)
    for name, value in (("horizon_h", horizon_h), ("origins", origins), ("step_h", step_h)):
        if not isinstance(value, int) or value < 1:
            raise BadInputError(f"{name}: must be a whole number >= 1, got {value!r}")
    n = x.size
    h0 = int(history_start // HOUR_S)
    starts = [o for o in range(n - horizon_h, -1, -step_h)[:origins] if o >= 2 * WEEK_H]
    if not starts:
        raise BadInputError(
            f"history: a back-test needs more than 2 weeks + {horizon_h} h of hourly counts, "
            f"got {n} h"
        )
    scaled, errors, naive_errors, inside = [], [], [], []
    method = ""
    for o in starts:
        lo, mid, hi, used, _, _ = _forecast(x, h0, o, horizon_h)
        method = method or used  # the latest origin's
        actual = x[o : o + horizon_h]
        naive = x[o - WEEK_H : o][np.arange(horizon_h) % WEEK_H]
        err = np.abs(actual - mid)
        scale = float(np.abs(x[WEEK_H:o] - x[: o - WEEK_H]).mean())
        if scale > 0:
            scaled.append(float(err.mean()) / scale)
        errors.append(err)
        naive_errors.append(np.abs(actual - naive))
        inside.append((actual >= lo) & (actual <= hi))
    err_all, naive_all = np.concatenate(errors), np.concatenate(naive_errors)
    naive_mae = float(naive_all.mean())
    return Backtest(
        mase=float(np.mean(scaled)) if scaled else float("nan"),
        relative_mae=float(err_all.mean()) / naive_mae if naive_mae > 0 else float("nan"),
        coverage=float(np.concatenate(inside).mean()),
        origins=len(starts),
        hours=int(err_all.size),
        horizon_h=horizon_h,
        method=method,
    )
