"""Task arrivals: a non-homogeneous Poisson process with a daily curve, a weekly curve and bursts.

The intensity at Unix time t is

    λ(t) = mean_rate · hourly(t) · weekday(t) / (mean(hourly) · mean(weekday)) · burst(t)

where hourly() interpolates the 24 hourly values linearly between hour centres (UTC, wrapping at
midnight) and weekday() is the day's factor. Dividing by the means makes `mean_rate` the average
over a week without bursts. Bursts multiply the rate over short spans; they are additional load.

λ is taken constant over bins of `bin_s` seconds (its value at the bin's middle), which makes the
draw exact for that piecewise-constant intensity: a Poisson count per bin, then uniform times in
the bin. Everything is drawn from the caller's numpy Generator.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from models.workload.config import ArrivalConfig

DAY_S = 86_400.0
HOUR_S = 3_600.0
DEFAULT_BIN_S = 60.0
_EPOCH_WEEKDAY = 3  # 1970-01-01 was a Thursday (Monday = 0)


@dataclass(frozen=True, slots=True)
class Burst:
    start_s: float  # Unix seconds
    duration_s: float
    multiplier: float


def weekday_of(unix_s: np.ndarray | float) -> np.ndarray:
    """Monday = 0 ... Sunday = 6, in UTC."""
    return ((np.floor_divide(unix_s, DAY_S) + _EPOCH_WEEKDAY) % 7).astype(np.int64)


def hourly_factor(hourly: tuple[float, ...], unix_s: np.ndarray) -> np.ndarray:
    """The daily curve at `unix_s`: linear between the values at each UTC hour's middle."""
    values = np.asarray(hourly, dtype=float)
    hours = (np.mod(unix_s, DAY_S) / HOUR_S) - 0.5  # 0.0 at 00:30, the first value's centre
    low = np.floor(hours).astype(np.int64)
    frac = hours - low
    return values[low % 24] * (1 - frac) + values[(low + 1) % 24] * frac


def base_intensity(arrivals: ArrivalConfig, unix_s: np.ndarray) -> np.ndarray:
    """λ(t) without bursts, in tasks per second."""
    norm = float(np.mean(arrivals.hourly)) * float(np.mean(arrivals.weekday))
    weekday = np.asarray(arrivals.weekday, dtype=float)[weekday_of(unix_s)]
    return arrivals.mean_rate_per_s * hourly_factor(arrivals.hourly, unix_s) * weekday / norm


def draw_bursts(
    arrivals: ArrivalConfig, rng: np.random.Generator, start_s: float, duration_s: float
) -> tuple[Burst, ...]:
    """The bursts that start inside [start_s, start_s + duration_s)."""
    cfg = arrivals.bursts
    if cfg is None or cfg.per_day == 0 or duration_s <= 0:
        return ()
    count = int(rng.poisson(cfg.per_day * duration_s / DAY_S))
    starts = np.sort(rng.uniform(start_s, start_s + duration_s, count))
    durations = cfg.duration_s.sample(rng, count)
    multipliers = cfg.multiplier.sample(rng, count)
    return tuple(
        Burst(float(s), float(d), float(m))
        for s, d, m in zip(starts, durations, multipliers, strict=True)
    )


def intensity(
    arrivals: ArrivalConfig,
    bin_starts: np.ndarray,
    bin_s: float,
    bursts: tuple[Burst, ...] = (),
) -> np.ndarray:
    """Mean rate over each bin: the base curve at the bin's middle, times the bursts that
    cover it (a burst covering part of a bin raises the bin in proportion)."""
    rate = base_intensity(arrivals, bin_starts + bin_s / 2)
    factor = np.ones_like(rate)
    for burst in bursts:
        overlap = np.clip(
            np.minimum(bin_starts + bin_s, burst.start_s + burst.duration_s)
            - np.maximum(bin_starts, burst.start_s),
            0.0,
            bin_s,
        )
        factor += (burst.multiplier - 1.0) * overlap / bin_s
    return rate * factor


def draw_arrivals(
    arrivals: ArrivalConfig,
    rng: np.random.Generator,
    start_s: float,
    duration_s: float,
    *,
    bin_s: float = DEFAULT_BIN_S,
) -> tuple[np.ndarray, tuple[Burst, ...]]:
    """Arrival times (Unix seconds, sorted) in [start_s, start_s + duration_s), and the bursts."""
    if duration_s <= 0:
        return np.empty(0), ()
    bursts = draw_bursts(arrivals, rng, start_s, duration_s)
    edges = np.arange(start_s, start_s + duration_s, bin_s)
    widths = np.minimum(edges + bin_s, start_s + duration_s) - edges
    counts = rng.poisson(intensity(arrivals, edges, bin_s, bursts) * widths)
    times = np.repeat(edges, counts) + rng.uniform(0.0, 1.0, int(counts.sum())) * np.repeat(
        widths, counts
    )
    times.sort()
    return times, bursts
