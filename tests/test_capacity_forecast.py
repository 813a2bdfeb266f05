"""The capacity planner's traffic forecast, replica schedule and back-test
(models/capacity/forecast.py, issue #13)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from inferledger.core.errors import BadInputError
from models.capacity.forecast import (
    ReplicaSchedule,
    TrafficForecast,
    backtest,
    forecast_traffic,
    replica_schedule,
)

WEEK = 168
START = 1_736_121_600.0  # 2025-01-06 00:00 UTC, a Monday


def weekly_pattern(scale: float = 100.0) -> np.ndarray:
    """A diurnal curve, quieter weekends: 168 hourly means."""
    hours = np.arange(WEEK)
    day = 1.0 + 0.8 * np.sin(2 * np.pi * ((hours % 24) - 8) / 24)
    weekend = np.where(hours // 24 >= 5, 0.4, 1.0)
    return scale * day * weekend + 1.0


def noisy(weeks: int, *, scale: float = 100.0, seed: int = 0, trend: float = 0.0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    mean = np.tile(weekly_pattern(scale), weeks)
    mean = mean * (1 + trend) ** (np.arange(mean.size) / WEEK)
    return rng.poisson(mean).astype(float)


def test_shapes_start_and_json() -> None:
    history = noisy(6)
    fc = forecast_traffic(history, START, weeks=13)
    assert isinstance(fc, TrafficForecast)
    assert fc.start == START + history.size * 3600
    for q in (fc.p10, fc.p50, fc.p90):
        assert q.shape == (13 * WEEK,)
    assert (fc.p10 <= fc.p50).all() and (fc.p50 <= fc.p90).all() and (fc.p10 >= 0).all()
    d = fc.to_dict()
    assert d["hours"] == 13 * WEEK and len(d["p50"]) == 13 * WEEK
    text = json.dumps(d)
    assert len(text) < 60_000  # three rounded series of 2,184 hours
    assert json.loads(text)["method"] == fc.method


def test_deterministic() -> None:
    history = noisy(8, seed=3)
    a = forecast_traffic(history, START, growth_per_month=0.05)
    b = forecast_traffic(list(history), START, growth_per_month=0.05)
    assert a.to_dict() == b.to_dict()
    assert np.array_equal(a.p90, b.p90)


def test_pure_weekly_pattern_is_forecast() -> None:
    pattern = weekly_pattern()
    fc = forecast_traffic(np.tile(pattern, 6), START, weeks=4)
    np.testing.assert_allclose(fc.p50, np.tile(pattern, 4), rtol=1e-6)
    assert fc.trend_per_week == pytest.approx(0.0, abs=1e-12)
    # a history that does not start on Monday still lines the pattern up by position
    shifted = forecast_traffic(np.tile(pattern, 6)[5:], START + 5 * 3600, weeks=1)
    np.testing.assert_allclose(shifted.p50, pattern, rtol=1e-6)


def test_noisy_weekly_pattern_within_tolerance_and_band_holds_most_hours() -> None:
    pattern = weekly_pattern()
    history = noisy(10, seed=1)
    fc = forecast_traffic(history, START, weeks=2)
    rel = np.abs(fc.p50 / np.tile(pattern, 2) - 1)
    assert np.median(rel) < 0.06
    future = noisy(12, seed=2)[-2 * WEEK :]
    inside = ((future >= fc.p10) & (future <= fc.p90)).mean()
    assert 0.7 <= inside <= 0.9
    assert "band from" in fc.method and fc.band_origins >= 8


def test_trend_is_read_and_damped() -> None:
    history = noisy(10, seed=4, trend=0.03)
    fc = forecast_traffic(history, START, weeks=13)
    assert fc.trend_per_week == pytest.approx(0.03, abs=0.01)
    assert "trend" in fc.method
    weekly = fc.p50.reshape(13, WEEK).sum(axis=1)
    growth = weekly[1:] / weekly[:-1] - 1
    assert growth[0] > 0.015  # grows ...
    assert growth[-1] < growth[0]  # ... less and less (damped)
    assert weekly[-1] < weekly[0] * 1.03**13  # never the undamped line
    flat = forecast_traffic(noisy(10, seed=4), START, weeks=13)
    assert abs(flat.trend_per_week) < 0.01


def test_growth_knob_compounds_monthly() -> None:
    history = noisy(8, seed=5)
    base = forecast_traffic(history, START, weeks=13)
    grown = forecast_traffic(history, START, weeks=13, growth_per_month=0.10)
    ratio = grown.p50 / base.p50
    hours = np.arange(13 * WEEK) + 0.5
    np.testing.assert_allclose(ratio, 1.10 ** (hours / 730.0), rtol=1e-9)
    assert ratio[-1] == pytest.approx(1.10 ** (2183.5 / 730), rel=1e-9)  # ~ +33 % at 3 months
    np.testing.assert_allclose(grown.p90 / base.p90, ratio, rtol=1e-9)
    assert "growth knob +10.0%/month" in grown.method


def test_band_widens_with_noise() -> None:
    rng = np.random.default_rng(6)
    mean = np.tile(weekly_pattern(), 10)
    quiet = rng.poisson(mean).astype(float)
    loud = rng.poisson(mean * rng.lognormal(0.0, 0.35, mean.size)).astype(float)
    width_quiet = forecast_traffic(quiet, START, weeks=1)
    width_loud = forecast_traffic(loud, START, weeks=1)
    q = np.mean(width_quiet.p90 - width_quiet.p10)
    loud_width = np.mean(width_loud.p90 - width_loud.p10)
    assert loud_width > 2 * q


def test_short_history_assumes_a_band_and_says_so() -> None:
    history = noisy(1)[:100]  # four days
    fc = forecast_traffic(history, START, weeks=1)
    assert "assumed ±50 % band" in fc.method
    assert fc.band_origins == 0
    np.testing.assert_allclose(fc.p10, fc.p50 * 0.5)
    np.testing.assert_allclose(fc.p90, fc.p50 * 1.5)
    none = forecast_traffic([], START, weeks=2)
    assert none.method.startswith("no history") and not none.p90.any()
    assert none.p50.shape == (2 * WEEK,)


def test_long_horizon_holds_the_longest_measured_lead() -> None:
    fc = forecast_traffic(noisy(8, seed=8), START, weeks=13)
    assert "held beyond week" in fc.method


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"history": [1.0, -1.0]}, "history"),
        ({"history": [1.0, float("nan")]}, "history"),
        ({"history_start": START + 60}, "history_start"),
        ({"weeks": 0}, "weeks"),
        ({"growth_per_month": -1.0}, "growth_per_month"),
    ],
)
def test_bad_input_names_the_field(kwargs: dict, field: str) -> None:
    args = {"history": [1.0] * 48, "history_start": START, **kwargs}
    with pytest.raises(BadInputError, match=field):
        forecast_traffic(args.pop("history"), args.pop("history_start"), **args)


def test_schedule_arithmetic() -> None:
    p50 = np.array([0.0, 3600.0, 7200.0, 10_000.0])  # requests per hour
    sched = replica_schedule(p50 * 0.5, p50, p50 * 1.5, 1.0, 2, 3.0, 4)
    assert isinstance(sched, ReplicaSchedule)
    # 0 req/s still keeps one replica; exactly 1 knee needs 1; 2.78 req/s needs 3
    assert sched.replicas.tolist() == [1, 1, 2, 3]
    assert sched.replicas_p90.tolist() == [1, 2, 3, 5]
    assert sched.autoscaler_gpu_hours[1] == pytest.approx(7 / 4 * 2 * 730)
    assert sched.autoscaler_cost[1] == pytest.approx(7 / 4 * 2 * 730 * 3.0)
    assert sched.static_gpu_hours == pytest.approx(4 * 2 * 730)
    assert sched.static_cost == pytest.approx(4 * 2 * 730 * 3.0)
    assert sched.peak_hour_p90 == 3 and sched.peak_replicas_p90 == 5
    assert sched.hours_short_p90 == 1
    lo, mid, hi = sched.autoscaler_gpu_hours
    assert lo <= mid <= hi
    d = json.loads(json.dumps(sched.to_dict()))
    assert d["replicas"] == [1, 1, 2, 3] and "start" not in d
    assert d["static"]["replicas"] == 4 and d["peak_p90"] == {"hour": 3, "replicas": 5}


def test_autoscaler_never_costs_more_than_a_static_plan_that_covers_the_peak() -> None:
    fc = forecast_traffic(noisy(6, seed=9), START, weeks=13, growth_per_month=0.05)
    knee = 0.01  # req/s per replica
    static = int(np.ceil(fc.p90.max() / 3600 / knee))
    sched = replica_schedule(fc.p10, fc.p50, fc.p90, knee, 1, 2.5, static, start=fc.start)
    assert sched.hours_short_p90 == 0
    assert sched.autoscaler_gpu_hours[2] <= sched.static_gpu_hours
    assert sched.autoscaler_cost[1] < sched.static_cost
    d = sched.to_dict()
    assert d["start"] == fc.start and len(d["replicas"]) == 13 * WEEK
    assert len(json.dumps(d)) < 20_000


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"knee_rate": 0.0}, "knee_rate"),
        ({"gpus_per_replica": 0}, "gpus_per_replica"),
        ({"static_replicas": 0}, "static_replicas"),
        ({"price_per_gpu_hour": -1.0}, "price_per_gpu_hour"),
        ({"rate_p90": [1.0]}, "rate_p10, rate_p50, rate_p90"),
        ({"rate_p50": [-1.0, 1.0]}, "rate_p50"),
    ],
)
def test_schedule_bad_input(change: dict, field: str) -> None:
    args = {
        "rate_p10": [1.0, 2.0],
        "rate_p50": [1.0, 2.0],
        "rate_p90": [1.0, 2.0],
        "knee_rate": 1.0,
        "gpus_per_replica": 1,
        "price_per_gpu_hour": 1.0,
        "static_replicas": 1,
        **change,
    }
    with pytest.raises(BadInputError, match=field):
        replica_schedule(**args)


def test_backtest_beats_seasonal_naive_on_a_seasonal_series() -> None:
    history = noisy(9, seed=10, scale=40.0)
    result = backtest(history, START, horizon_h=WEEK, origins=14)
    assert result.origins == 14 and result.hours == 14 * WEEK
    assert result.mase < 1.0
    assert result.relative_mae < 1.0
    assert 0.7 <= result.coverage <= 0.9
    assert json.loads(json.dumps(result.to_dict()))["origins"] == 14


def test_backtest_scores_a_bad_forecast_badly() -> None:
    """The metric can fail: the daily curve shifts by 12 hours three weeks before the end.
    The seasonal-naive's last week has it; the 4-week median profile still lags."""
    pattern = weekly_pattern()
    history = np.concatenate([np.tile(pattern, 9), np.tile(np.roll(pattern, 12), 3)])
    result = backtest(history, START, horizon_h=WEEK, origins=14)
    assert result.mase > 1.0 and result.relative_mae > 1.0
    assert result.coverage < 0.5


def test_backtest_needs_history() -> None:
    with pytest.raises(BadInputError, match="history"):
        backtest(noisy(2), START)
