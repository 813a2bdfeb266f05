"""Spend spikes (models/spike_detection.py): the same-hour-of-week baseline, the ratio and its
floor, and the defaults through the real lifecycle (a small run of bench/spike_detection.py)."""

from __future__ import annotations

import importlib.util
import math
import sys
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from models.alert_config import AlertRule
from models.alert_lifecycle import Observation, OpenAlert, evaluate, is_open
from models.spike_detection import (
    DEFAULT_MIN_BASELINE,
    DEFAULT_PENDING_S,
    DEFAULT_RESOLVE_S,
    DEFAULT_RESOLVE_THRESHOLD,
    DEFAULT_THRESHOLD,
    Baseline,
    hourly_index,
    robust_z,
    same_hour_of_week_baseline,
    spike_ratio,
)

ROOT = Path(__file__).resolve().parent.parent
H = timedelta(hours=1)
W = timedelta(days=7)
MON_10 = datetime(2026, 3, 30, 10, tzinfo=UTC)  # a Monday


def test_baseline_takes_exactly_the_same_hour_of_the_week_k_weeks_back():
    series = [(MON_10 - k * W, 10.0 * k) for k in range(1, 7)]
    # neighbours that must not count: an hour off, a day off, the hour itself
    series += [
        (MON_10 - W + H, 999.0),
        (MON_10 - W - H, 999.0),
        (MON_10 - timedelta(days=6), 999.0),
    ]
    series += [(MON_10, 555.0)]
    base = same_hour_of_week_baseline(series, MON_10 + timedelta(minutes=42))
    assert base.values == (40.0, 30.0, 20.0, 10.0)  # oldest first, k = 4 … 1
    assert base.n_weeks == 4 and base.median == 25.0 and base.mad == 10.0
    assert same_hour_of_week_baseline(series, MON_10, weeks=6).values == (
        60.0,
        50.0,
        40.0,
        30.0,
        20.0,
        10.0,
    )
    assert same_hour_of_week_baseline(series, MON_10, weeks=1).median == 10.0


def test_absent_weeks_are_left_out_not_zero():
    series = [(MON_10 - W, 8.0), (MON_10 - 3 * W, 12.0), (MON_10 - 4 * W, 11.0)]
    base = same_hour_of_week_baseline(series, MON_10)
    assert base.values == (11.0, 12.0, 8.0) and base.n_weeks == 3 and base.median == 11.0
    assert base.mad == 1.0
    empty = same_hour_of_week_baseline(series, MON_10 + H)
    assert empty == Baseline(None, None, 0, ())


def test_median_shrugs_off_one_earlier_spike():
    series = [
        (MON_10 - k * W, v) for k, v in zip(range(1, 5), (10.0, 50.0, 11.0, 9.0), strict=True)
    ]
    base = same_hour_of_week_baseline(series, MON_10)
    assert base.median == 10.5  # the mean would be 20
    assert spike_ratio(10.0, base, min_baseline=1.0) == pytest.approx(10 / 10.5)


def test_time_zones_are_aligned_in_utc_and_naive_times_rejected():
    cet = timezone(timedelta(hours=1))
    series = [((MON_10 - k * W).astimezone(cet), float(k)) for k in range(1, 5)]
    assert same_hour_of_week_baseline(series, MON_10.astimezone(cet)).median == 2.5
    with pytest.raises(ValueError, match="timezone-aware"):
        same_hour_of_week_baseline(series, datetime(2026, 3, 30, 10))
    with pytest.raises(ValueError, match="timezone-aware"):
        same_hour_of_week_baseline([(datetime(2026, 3, 23, 10), 1.0)], MON_10)


@pytest.mark.parametrize(
    ("series", "message"),
    [
        ([(MON_10 - W, 1.0), (MON_10 - W + timedelta(minutes=5), 2.0)], "appears twice"),
        ([(MON_10 - W, float("nan"))], "finite"),
        ([(MON_10 - W, -1.0)], ">= 0"),
    ],
)
def test_bad_series_are_rejected(series, message):
    with pytest.raises(ValueError, match=message):
        same_hour_of_week_baseline(series, MON_10)


def test_weeks_must_be_positive():
    with pytest.raises(ValueError, match="weeks"):
        same_hour_of_week_baseline([], MON_10, weeks=0)


def test_ratio_is_value_over_median_floored_by_min_baseline():
    base = Baseline(20.0, 2.0, 4, (18.0, 20.0, 20.0, 22.0))
    assert spike_ratio(60.0, base, min_baseline=1.0) == 3.0
    assert spike_ratio(60.0, base, min_baseline=30.0) == 2.0  # the floor wins
    cents = Baseline(0.02, 0.0, 4, (0.02,) * 4)
    assert spike_ratio(0.2, cents, min_baseline=1.0) == pytest.approx(0.2)  # 10x of cents: no
    assert spike_ratio(5.0, Baseline(None, None, 0, ()), min_baseline=2.0) == 2.5
    for bad in (0.0, -1.0, math.nan, math.inf):
        with pytest.raises(ValueError, match="min_baseline"):
            spike_ratio(1.0, base, min_baseline=bad)
    with pytest.raises(ValueError, match="spend"):
        spike_ratio(-1.0, base, min_baseline=1.0)


def test_robust_z_uses_mad_with_a_floor():
    base = Baseline(20.0, 2.0, 4, (18.0, 20.0, 20.0, 22.0))
    assert robust_z(20.0 + 2 * 1.4826 * 2.0, base, min_scale=0.1) == pytest.approx(2.0)
    flat = Baseline(20.0, 0.0, 4, (20.0,) * 4)
    assert robust_z(25.0, flat, min_scale=5.0) == 1.0
    with pytest.raises(ValueError, match="at least one week"):
        robust_z(1.0, Baseline(None, None, 0, ()), min_scale=1.0)
    with pytest.raises(ValueError, match="min_scale"):
        robust_z(1.0, base, min_scale=0.0)


def seasonal_series(weeks: int) -> list[tuple[datetime, float]]:
    """Weekdays 09-18 cost $30/h, other hours $6/h, weekends $3/h."""
    out = []
    start = MON_10.replace(hour=0) - weeks * W
    for h in range(weeks * 168):
        t = start + h * H
        if t.weekday() >= 5:
            v = 3.0
        elif 9 <= t.hour < 18:
            v = 30.0
        else:
            v = 6.0
        out.append((t, v))
    return out


def test_weekday_peak_is_normal_and_a_sunday_night_at_weekday_level_is_a_spike():
    index = hourly_index(seasonal_series(4))
    mean = sum(index.values()) / len(index)
    # Monday 10:00 at its usual $30: three times the flat mean, but ratio 1
    assert 30.0 / mean > DEFAULT_THRESHOLD
    base = same_hour_of_week_baseline(index, MON_10)
    assert spike_ratio(30.0, base, min_baseline=DEFAULT_MIN_BASELINE) == 1.0
    # Sunday 03:00 at $9: under the flat mean, but three times its usual $3
    sunday_3 = MON_10.replace(hour=3) - timedelta(days=1)
    index = hourly_index([(t, v) for t, v in seasonal_series(5) if t < sunday_3])
    base = same_hour_of_week_baseline(index, sunday_3)
    assert mean > 9.0
    assert spike_ratio(9.0, base, min_baseline=DEFAULT_MIN_BASELINE) == 3.0


def spike_rule() -> AlertRule:
    return AlertRule(
        name="spike",
        kind="spend_spike",
        owner="finance",
        window_s=3600,
        threshold=DEFAULT_THRESHOLD,
        resolve_threshold=DEFAULT_RESOLVE_THRESHOLD,
        pending_s=DEFAULT_PENDING_S,
        resolve_s=DEFAULT_RESOLVE_S,
    )


def run_hours(
    series: list[tuple[datetime, float]], first: datetime, key: str = "{}"
) -> list[tuple[datetime, str]]:
    """Hourly ticks over the hours from ``first``: (tick, event) of every non-update event."""
    index = hourly_index(series)
    r = spike_rule()
    open_alerts: dict[str, OpenAlert] = {}
    out = []
    for hour, value in series:
        if hour < first:
            continue
        base = same_hour_of_week_baseline(index, hour)
        ratio = spike_ratio(value, base, min_baseline=DEFAULT_MIN_BASELINE)
        tick = hour + H
        for tr in evaluate(r, open_alerts, [Observation(key, ratio)], tick):
            if tr.event != "update":
                out.append((tick, tr.event))
            if is_open(tr.alert):
                open_alerts[key] = tr.alert
            else:
                open_alerts.pop(key)
    return out


def test_a_three_hour_spike_is_one_alert_resolved_after_an_hour_and_a_near_miss_is_silent():
    series = seasonal_series(6)
    first = series[-168][0]  # score the last week
    start = MON_10 - W  # Monday 10:00 of the last week
    spiked = [(t, v * (2.5 if start <= t < start + 3 * H else 1.0)) for t, v in series]
    assert run_hours(spiked, first) == [
        (start + H, "firing"),
        (start + 5 * H, "resolved"),  # one hour back to normal after the spike, then resolved
    ]
    near = [(t, v * (1.9 if start <= t < start + 3 * H else 1.0)) for t, v in series]
    assert run_hours(near, first) == []


def test_a_scope_that_costs_cents_does_not_alert_on_a_tenfold_spike():
    series = [(t, v / 1000) for t, v in seasonal_series(6)]
    start = MON_10 - W
    spiked = [(t, v * (10.0 if t == start else 1.0)) for t, v in series]
    assert run_hours(spiked, series[-168][0]) == []


def _load_bench() -> Any:
    path = ROOT / "bench" / "spike_detection.py"
    spec = importlib.util.spec_from_file_location("bench_spike_detection", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_spike_detection"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_defaults_meet_the_benchmark_targets_on_a_small_held_out_run():
    bench = _load_bench()
    score = bench.run(
        200,  # not a tuning seed (0-4) nor a reported held-out seed (100-104)
        scopes=12,
        weeks=4,
        warmup_weeks=4,
        spikes_per_week=1.0,
        rule=spike_rule(),
        min_baseline=DEFAULT_MIN_BASELINE,
    )
    assert score.spikes >= 30
    assert score.precision >= 0.9 and score.recall >= 0.9
    assert score.false_per_scope_week <= 1.0


def test_the_benchmark_scenario_is_seeded():
    bench = _load_bench()
    a = bench.make_scenario(np.random.default_rng(7), 3, 336, 1.0)
    b = bench.make_scenario(np.random.default_rng(7), 3, 336, 1.0)
    assert np.array_equal(a.series, b.series) and a.spikes == b.spikes
