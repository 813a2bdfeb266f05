"""The spend forecast (models/spend_forecast.py) on synthetic series built here: a pure weekly
pattern is forecast almost exactly, the band is ordered and widens with noise, exhaustion
dates, burn rate, the edge cases (no history, a period just started, a period over, all
zeros) and bad input."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from models.budget_period import PeriodSpec, period_bounds
from models.spend_forecast import forecast_period, history_start, straight_line

START = datetime(2026, 1, 5, tzinfo=UTC)  # a Monday
HOUR = timedelta(hours=1)


def shape(t: datetime) -> float:
    """Weekdays busier than weekends, a daytime peak: $/hour."""
    day = 1.0 if t.weekday() < 5 else 0.35
    return 2.0 * day * (1 + 0.6 * math.sin(2 * math.pi * (t.hour - 9) / 24))


def series(
    hours: int, noise: float = 0.0, seed: int = 0, start: datetime = START
) -> list[tuple[datetime, float]]:
    rng = np.random.default_rng(seed)
    out = []
    day_level = 1.0
    for i in range(hours):
        t = start + i * HOUR
        if i % 24 == 0:
            day_level = 1 + noise * rng.uniform(-1, 1)
        out.append((t, shape(t) * day_level))
    return out


def actual_total(hourly: list[tuple[datetime, float]], start: datetime, end: datetime) -> float:
    return sum(v for t, v in hourly if start <= t < end)


def test_a_pure_weekly_pattern_is_forecast_within_a_tight_tolerance() -> None:
    full = series(24 * 7 * 9)
    now = datetime(2026, 2, 18, 12, tzinfo=UTC)  # a Wednesday in the 7th week
    start, end = period_bounds(PeriodSpec("monthly"), now)
    history = [(t, v) for t, v in full if t < now]
    forecast = forecast_period(history, start, end, now)
    actual = actual_total(full, start, end)
    assert forecast.spent == pytest.approx(actual_total(full, start, now))
    assert forecast.p50 == pytest.approx(actual, rel=1e-6)
    assert forecast.p10 == pytest.approx(actual, rel=1e-6)  # no past error: no band
    assert forecast.p90 == pytest.approx(actual, rel=1e-6)
    assert "hour-of-week" in forecast.method and forecast.band_origins >= 8
    # The straight line misses the weekends still to come.
    assert abs(straight_line(history, start, end, now) / actual - 1) > 0.01


def test_a_weekly_period_at_mid_week_beats_the_straight_line() -> None:
    full = series(24 * 7 * 6, noise=0.05, seed=4)
    now = datetime(2026, 2, 12, 12, tzinfo=UTC)  # Thursday noon: weekdays so far, weekend ahead
    start, end = period_bounds(PeriodSpec("weekly"), now)
    history = [(t, v) for t, v in full if t < now]
    actual = actual_total(full, start, end)
    forecast = forecast_period(history, start, end, now)
    naive = straight_line(history, start, end, now)
    assert abs(forecast.p50 / actual - 1) < 0.04
    assert naive / actual - 1 > 0.1  # projects weekday spend onto the weekend
    assert forecast.p10 <= forecast.p50 <= forecast.p90
    assert forecast.p10 < forecast.p90  # noise in the past errors: a band


def test_the_band_is_ordered_and_cumulative() -> None:
    history = series(24 * 7 * 5, noise=0.15, seed=1)
    now = START + 24 * 7 * 5 * HOUR - timedelta(minutes=20)
    start, end = period_bounds(PeriodSpec("monthly", reset_day=5), now)
    forecast = forecast_period(history, start, end, now)
    assert forecast.band[0][0] == now
    assert forecast.band[-1][0] == end
    assert forecast.band[-1][1:] == (forecast.p10, forecast.p50, forecast.p90)
    assert all(p10 <= p50 <= p90 for _, p10, p50, p90 in forecast.band)
    for a, b in zip(forecast.band, forecast.band[1:], strict=False):
        assert b[0] - a[0] <= HOUR and b[0] > a[0]
        assert b[1] >= a[1] and b[2] >= a[2] and b[3] >= a[3]
    assert forecast.band[1][0] == now.replace(minute=0) + HOUR  # hour boundaries after now
    assert forecast.p10 >= forecast.spent


def test_noisier_history_gives_a_wider_band() -> None:
    now = START + 24 * 7 * 6 * HOUR + 12 * HOUR
    start, end = period_bounds(PeriodSpec("weekly"), now)
    widths = []
    for noise in (0.05, 0.3):
        forecast = forecast_period(series(24 * 7 * 6 + 12, noise, seed=2), start, end, now)
        widths.append((forecast.p90 - forecast.p10) / forecast.p50)
    assert widths[1] > 2 * widths[0]


def test_exhaustion_date_is_when_p50_crosses_the_amount() -> None:
    # A flat $1/hour for two weeks: the weekly budget of $100 runs out 100 h into the week.
    history = [(START + i * HOUR, 1.0) for i in range(24 * 7 * 2 + 30)]
    now = START + (24 * 7 * 2 + 30) * HOUR
    start, end = period_bounds(PeriodSpec("weekly"), now)
    forecast = forecast_period(history, start, end, now, amount=100.0)
    assert forecast.spent == pytest.approx(30.0)
    assert forecast.p50 == pytest.approx(168.0)
    assert forecast.exhaustion_at == start + 100 * HOUR
    assert forecast.days_to_exhaustion == pytest.approx(70 / 24)
    assert forecast.burn_rate_per_day == pytest.approx(24.0)
    assert forecast_period(history, start, end, now, amount=500.0).exhaustion_at is None
    # Already spent: the moment it was crossed, 0 days to go.
    spent_out = forecast_period(history, start, end, now, amount=20.5)
    assert spent_out.exhaustion_at == start + timedelta(hours=20, minutes=30)
    assert spent_out.days_to_exhaustion == 0.0


def test_burn_rate_uses_the_last_24_hours_or_the_period_so_far() -> None:
    history = [(START + i * HOUR, 1.0 if i < 24 * 9 else 3.0) for i in range(24 * 10)]
    now = START + 24 * 10 * HOUR
    day_start, day_end = now - 24 * HOUR, now
    forecast = forecast_period(history, day_start, day_end + 24 * HOUR, now)
    assert forecast.burn_rate_per_day == pytest.approx(72.0)
    # Six hours into a period: the rate since its start.
    mixed = [(t, 6.0 if t >= now - 6 * HOUR else 1.0) for t, _ in history]
    six = forecast_period(mixed, now - 6 * HOUR, now + 18 * HOUR, now)
    assert six.burn_rate_per_day == pytest.approx(144.0)


def test_the_current_partial_hour_counts_as_spent_and_its_rest_is_forecast() -> None:
    history = [(START + i * HOUR, 2.0) for i in range(24 * 3)]
    now = START + 24 * 3 * HOUR + timedelta(minutes=30)
    history.append((now.replace(minute=0), 1.0))  # half an hour at $2/h
    start, end = now.replace(minute=0), now.replace(minute=0) + 24 * HOUR
    forecast = forecast_period(history, start, end, now)
    assert forecast.spent == pytest.approx(1.0)
    assert forecast.p50 == pytest.approx(48.0)
    assert forecast.burn_rate_per_day == pytest.approx(48.0)


def test_no_history_forecasts_nothing() -> None:
    now = datetime(2026, 3, 10, 12, tzinfo=UTC)
    start, end = period_bounds(PeriodSpec("monthly"), now)
    forecast = forecast_period([], start, end, now, amount=10.0)
    assert (forecast.spent, forecast.p10, forecast.p50, forecast.p90) == (0, 0, 0, 0)
    assert forecast.method == "no history"
    assert forecast.exhaustion_at is None and forecast.days_to_exhaustion is None
    assert forecast.burn_rate_per_day == 0.0


def test_all_zero_history_forecasts_zero() -> None:
    history = [(START + i * HOUR, 0.0) for i in range(24 * 20)]
    now = START + 24 * 20 * HOUR
    start, end = period_bounds(PeriodSpec("weekly"), now)
    forecast = forecast_period(history, start, end, now, amount=1.0)
    assert forecast.p50 == forecast.p90 == 0.0 and forecast.exhaustion_at is None


def test_a_period_just_started_is_forecast_from_the_history_before_it() -> None:
    full = series(24 * 7 * 5)
    now = datetime(2026, 2, 2, 0, 0, 1, tzinfo=UTC)  # one second into a Monday week
    start, end = period_bounds(PeriodSpec("weekly"), now)
    history = [(t, v) for t, v in full if t < start]  # nothing yet in the period's first hour
    forecast = forecast_period(history, start, end, now)
    assert forecast.spent == 0.0
    assert forecast.p50 == pytest.approx(actual_total(full, start, end), rel=1e-3)
    assert forecast.burn_rate_per_day == pytest.approx(
        sum(v for t, v in full if start - 24 * HOUR <= t < start), rel=1e-3
    )


def test_short_history_falls_back_to_day_profile_then_flat_rate() -> None:
    three_days = series(24 * 3)  # Mon-Wed
    now = START + 24 * 3 * HOUR
    forecast = forecast_period(three_days, now, now + 24 * HOUR, now)
    assert "hour-of-day" in forecast.method
    assert forecast.p50 == pytest.approx(sum(shape(now + i * HOUR) for i in range(24)), rel=1e-6)
    assert "assumed" in forecast.method  # too short to back-test a band
    assert forecast.p10 < forecast.p50 < forecast.p90
    hours = [(START + i * HOUR, 2.0) for i in range(5)]
    flat = forecast_period(hours, START, START + 24 * HOUR, START + 5 * HOUR)
    assert flat.method.startswith("flat rate") and flat.p50 == pytest.approx(48.0)


def test_a_period_that_is_over_returns_its_actual_spend() -> None:
    full = series(24 * 14)
    start, end = START, START + 7 * 24 * HOUR
    forecast = forecast_period(full, start, end, START + 10 * 24 * HOUR, amount=1e6)
    actual = actual_total(full, start, end)
    assert forecast.spent == forecast.p10 == forecast.p50 == forecast.p90 == pytest.approx(actual)
    assert forecast.band == [] and forecast.method.startswith("period over")


def test_a_future_period_is_forecast_whole() -> None:
    full = series(24 * 7 * 5)
    now = START + 24 * 7 * 3 * HOUR
    start, end = now + 7 * 24 * HOUR, now + 14 * 24 * HOUR
    forecast = forecast_period([(t, v) for t, v in full if t < now], start, end, now)
    assert forecast.spent == 0.0
    assert forecast.p50 == pytest.approx(actual_total(full, start, end), rel=1e-6)


def test_hours_after_now_are_ignored_and_duplicates_add_up() -> None:
    now = START + 48 * HOUR
    base = [(START + i * HOUR, 1.0) for i in range(48)]
    with_future = base + [(now + i * HOUR, 100.0) for i in range(5)]
    doubled = [*base, (START + 47 * HOUR, 1.0)]
    a = forecast_period(base, START, now + 24 * HOUR, now)
    assert forecast_period(with_future, START, now + 24 * HOUR, now).p50 == pytest.approx(a.p50)
    assert forecast_period(doubled, START, now + 24 * HOUR, now).spent == pytest.approx(49.0)


@pytest.mark.parametrize(
    ("cost", "message"),
    [
        (-1.0, "cost -1.0 at hour 2026-01-05T03:00:00\\+00:00 is negative"),
        (float("nan"), "cost nan at hour 2026-01-05T03:00:00\\+00:00"),
        (float("inf"), "not a finite number"),
        ("abc", "cost 'abc' at hour 2026-01-05T03:00:00\\+00:00 is not a number"),
    ],
)
def test_bad_costs_are_rejected_naming_the_hour(cost: object, message: str) -> None:
    history: list[tuple[datetime, object]] = [(START + i * HOUR, 1.0) for i in range(10)]
    history[3] = (START + 3 * HOUR, cost)
    with pytest.raises(ValueError, match=message):
        forecast_period(history, START, START + 24 * HOUR, START + 10 * HOUR)  # type: ignore[arg-type]


def test_bad_times_and_amounts_are_rejected() -> None:
    now = START + 10 * HOUR
    ok = [(START, 1.0)]
    with pytest.raises(ValueError, match="whole UTC hour"):
        forecast_period([(START + timedelta(minutes=5), 1.0)], START, now, now)
    with pytest.raises(ValueError, match="timezone-aware"):
        forecast_period([(datetime(2026, 1, 5), 1.0)], START, now, now)
    with pytest.raises(ValueError, match="now must be a timezone-aware"):
        forecast_period(ok, START, now, datetime(2026, 1, 5))
    with pytest.raises(ValueError, match="is not after period_start"):
        forecast_period(ok, now, START, now)
    with pytest.raises(ValueError, match="amount -5"):
        forecast_period(ok, START, now + HOUR, now, amount=-5)


def test_forecasts_are_deterministic() -> None:
    history = series(24 * 7 * 6, noise=0.2, seed=9)
    now = START + 24 * 7 * 6 * HOUR
    start, end = period_bounds(PeriodSpec("monthly"), now)
    assert forecast_period(history, start, end, now) == forecast_period(history, start, end, now)


def test_history_start_covers_a_full_band_at_the_period_start() -> None:
    noise = series(24 * 7 * 30, noise=0.1, seed=3)
    start = datetime(2026, 7, 1, tzinfo=UTC)
    end = datetime(2026, 8, 1, tzinfo=UTC)
    begin = history_start(start, end)
    assert start - begin == timedelta(days=14 + 55 + 31)
    history = [(t, v) for t, v in noise if begin <= t < start]
    forecast = forecast_period(history, start, end, start)
    assert forecast.band_origins == 56 and "744-h forecasts" in forecast.method
    shorter = forecast_period(history[24 * 30 :], start, end, start)
    assert 8 <= shorter.band_origins < 56
