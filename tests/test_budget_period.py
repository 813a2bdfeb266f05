"""Budget periods (models/budget_period.py): each period type, resets at local midnight in the
budget's time zone (DST days are 23 h and 25 h long), reset days and week starts, instants
exactly on a boundary, and the validation messages."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from models.alert_config import Budget, ConfigError
from models.budget_period import (
    PeriodSpec,
    elapsed_fraction,
    next_period,
    period_bounds,
    periods_between,
    previous_period,
    validate_period_fields,
)

BERLIN = ZoneInfo("Europe/Berlin")
NEW_YORK = ZoneInfo("America/New_York")


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def local(tz: ZoneInfo, *args: int) -> datetime:
    return datetime(*args, tzinfo=tz).astimezone(UTC)


def test_daily_in_utc_and_exactly_at_midnight() -> None:
    spec = PeriodSpec("daily")
    assert period_bounds(spec, utc(2026, 3, 10, 15, 43)) == (utc(2026, 3, 10), utc(2026, 3, 11))
    # Midnight belongs to the period it starts; one microsecond before, to the one before.
    assert period_bounds(spec, utc(2026, 3, 11)) == (utc(2026, 3, 11), utc(2026, 3, 12))
    before = utc(2026, 3, 11) - timedelta(microseconds=1)
    assert period_bounds(spec, before) == (utc(2026, 3, 10), utc(2026, 3, 11))


def test_daily_resets_at_local_midnight() -> None:
    spec = PeriodSpec("daily", timezone="Europe/Berlin")
    # 23:30 UTC on 10 March is 00:30 in Berlin on the 11th (UTC+1 in winter).
    start, end = period_bounds(spec, utc(2026, 3, 10, 23, 30))
    assert start == utc(2026, 3, 10, 23) and end == utc(2026, 3, 11, 23)
    assert start.tzinfo == UTC
    spec_ny = PeriodSpec("daily", timezone="America/New_York")
    start, end = period_bounds(spec_ny, utc(2026, 7, 1, 3))  # 23:00 on 30 June in New York
    assert (start, end) == (utc(2026, 6, 30, 4), utc(2026, 7, 1, 4))


@pytest.mark.parametrize(
    ("tz", "day", "hours"),
    [
        (BERLIN, (2026, 3, 29), 23),  # spring forward
        (BERLIN, (2026, 10, 25), 25),  # fall back
        (NEW_YORK, (2026, 3, 8), 23),
        (NEW_YORK, (2026, 11, 1), 25),
        (BERLIN, (2026, 3, 28), 24),
    ],
)
def test_dst_days_are_23_or_25_hours(tz: ZoneInfo, day: tuple[int, int, int], hours: int) -> None:
    spec = PeriodSpec("daily", timezone=str(tz))
    noon = local(tz, *day, 12)
    start, end = period_bounds(spec, noon)
    assert start == local(tz, *day, 0)
    assert end - start == timedelta(hours=hours)
    # Just after the change (03:30 local on the spring day exists; 02:30 does not): same day.
    assert period_bounds(spec, start + timedelta(hours=hours) - timedelta(seconds=1)) == (
        start,
        end,
    )


def test_a_dst_week_and_month_are_an_hour_short() -> None:
    weekly = PeriodSpec("weekly", timezone="Europe/Berlin", week_start=0)
    start, end = period_bounds(weekly, utc(2026, 3, 27, 12))
    assert start == local(BERLIN, 2026, 3, 23) and end == local(BERLIN, 2026, 3, 30)
    assert end - start == timedelta(days=7, hours=-1)
    monthly = PeriodSpec("monthly", timezone="America/New_York")
    start, end = period_bounds(monthly, utc(2026, 11, 15))
    assert end - start == timedelta(days=30, hours=1)


@pytest.mark.parametrize(
    ("week_start", "expected_start_day"),
    [(0, 9), (3, 12), (6, 8)],  # Monday 9 March, Thursday 12th, Sunday 8th
)
def test_weekly_starts_on_its_week_start(week_start: int, expected_start_day: int) -> None:
    spec = PeriodSpec("weekly", week_start=week_start)
    at = utc(2026, 3, 12, 15, 43)  # a Thursday
    start, end = period_bounds(spec, at)
    assert start == utc(2026, 3, expected_start_day)
    assert end == start + timedelta(days=7)
    assert start <= at < end


def test_weekly_on_the_start_day_at_midnight() -> None:
    spec = PeriodSpec("weekly", week_start=3, timezone="America/New_York")
    thursday = local(NEW_YORK, 2026, 3, 12)
    assert period_bounds(spec, thursday) == (thursday, local(NEW_YORK, 2026, 3, 19))
    assert period_bounds(spec, thursday - timedelta(seconds=1))[1] == thursday


@pytest.mark.parametrize(
    ("at", "reset_day", "expected"),
    [
        (utc(2026, 3, 10), 1, (utc(2026, 3, 1), utc(2026, 4, 1))),
        (utc(2026, 3, 10), 15, (utc(2026, 2, 15), utc(2026, 3, 15))),
        (utc(2026, 3, 15), 15, (utc(2026, 3, 15), utc(2026, 4, 15))),
        (utc(2026, 1, 3), 5, (utc(2025, 12, 5), utc(2026, 1, 5))),  # across the year
        (utc(2026, 12, 31, 23, 59), 28, (utc(2026, 12, 28), utc(2027, 1, 28))),
        (utc(2026, 2, 28, 12), 28, (utc(2026, 2, 28), utc(2026, 3, 28))),
    ],
)
def test_monthly_on_its_reset_day(
    at: datetime, reset_day: int, expected: tuple[datetime, datetime]
) -> None:
    assert period_bounds(PeriodSpec("monthly", reset_day=reset_day), at) == expected


def test_monthly_in_a_time_zone_uses_the_local_date() -> None:
    spec = PeriodSpec("monthly", timezone="Europe/Berlin")
    # 23:30 UTC on 31 March is 01:30 on 1 April in Berlin (summer time, UTC+2).
    start, end = period_bounds(spec, utc(2026, 3, 31, 23, 30))
    assert start == utc(2026, 3, 31, 22) and end == utc(2026, 4, 30, 22)


@pytest.mark.parametrize(
    ("at", "reset_day", "expected"),
    [
        (utc(2026, 5, 20), 1, (utc(2026, 4, 1), utc(2026, 7, 1))),
        (utc(2026, 1, 1), 1, (utc(2026, 1, 1), utc(2026, 4, 1))),
        (utc(2026, 4, 10), 15, (utc(2026, 1, 15), utc(2026, 4, 15))),
        (utc(2026, 1, 10), 15, (utc(2025, 10, 15), utc(2026, 1, 15))),
        (utc(2026, 12, 31), 1, (utc(2026, 10, 1), utc(2027, 1, 1))),
    ],
)
def test_quarterly_on_january_april_july_october(
    at: datetime, reset_day: int, expected: tuple[datetime, datetime]
) -> None:
    assert period_bounds(PeriodSpec("quarterly", reset_day=reset_day), at) == expected


def test_custom_returns_its_bounds_even_outside_them() -> None:
    spec = PeriodSpec(
        "custom",
        custom_start=datetime(2026, 3, 1, 9, tzinfo=BERLIN),
        custom_end=utc(2026, 4, 1),
    )
    inside = period_bounds(spec, utc(2026, 3, 10))
    assert inside == (utc(2026, 3, 1, 8), utc(2026, 4, 1))
    assert period_bounds(spec, utc(2027, 1, 1)) == inside
    assert previous_period(spec, inside[0]) == (
        utc(2026, 3, 1, 8) - (inside[1] - inside[0]),
        inside[0],
    )
    assert list(periods_between(spec, utc(2026, 5, 1), utc(2026, 6, 1))) == []


def test_a_budget_is_a_spec() -> None:
    budget = Budget(
        name="b",
        amount=100.0,
        period="weekly",
        owner="ops",
        timezone="America/New_York",
        week_start=6,
    )
    validate_period_fields(budget)
    start, end = period_bounds(budget, utc(2026, 3, 12))
    assert start == local(NEW_YORK, 2026, 3, 8) and end == local(NEW_YORK, 2026, 3, 15)


def test_previous_next_and_between_chain_without_gaps() -> None:
    spec = PeriodSpec("monthly", timezone="Europe/Berlin", reset_day=10)
    current = period_bounds(spec, utc(2026, 3, 20))
    before = previous_period(spec, current[0])
    after = next_period(spec, current[1])
    assert before[1] == current[0] and after[0] == current[1]
    assert before[0] == local(BERLIN, 2026, 2, 10)
    periods = list(periods_between(spec, utc(2026, 1, 1), utc(2026, 7, 1)))
    assert periods[0][0] <= utc(2026, 1, 1) < periods[0][1]
    assert periods[-1][0] < utc(2026, 7, 1) <= periods[-1][1]
    assert all(a[1] == b[0] for a, b in itertools.pairwise(periods))
    assert len(periods) == 7
    assert elapsed_fraction(current, current[0]) == 0.0
    assert elapsed_fraction(current, current[1] + timedelta(days=3)) == 1.0
    middle = current[0] + (current[1] - current[0]) / 2
    assert elapsed_fraction(current, middle) == pytest.approx(0.5)


def test_naive_instants_are_rejected() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        period_bounds(PeriodSpec("daily"), datetime(2026, 3, 1))


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (PeriodSpec("fortnightly"), "unknown period 'fortnightly'"),
        (PeriodSpec("daily", timezone="Mars/Olympus"), "unknown timezone 'Mars/Olympus'"),
        (PeriodSpec("daily", timezone=""), "timezone '' is not an IANA"),
        (PeriodSpec("weekly", week_start=7), "week_start 7 is out of range"),
        (PeriodSpec("monthly", reset_day=29), "reset_day 29 is out of range"),
        (PeriodSpec("monthly", reset_day=0), "reset_day 0 is out of range"),
        (PeriodSpec("custom", custom_start=utc(2026, 1, 1)), "needs both"),
        (
            PeriodSpec("custom", custom_start=utc(2026, 2, 1), custom_end=utc(2026, 1, 1)),
            "custom_end 2026-01-01T00:00:00\\+00:00 is not after custom_start",
        ),
        (
            PeriodSpec("custom", custom_start=datetime(2026, 1, 1), custom_end=utc(2026, 2, 1)),
            "custom_start 2026-01-01T00:00:00 has no time zone",
        ),
    ],
)
def test_validation_says_what_is_wrong(spec: PeriodSpec, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        validate_period_fields(spec)


def test_valid_specs_pass_validation() -> None:
    for spec in (
        PeriodSpec("daily", timezone="Asia/Kolkata"),
        PeriodSpec("weekly", week_start=6),
        PeriodSpec("quarterly", reset_day=28),
        PeriodSpec("custom", custom_start=utc(2026, 1, 1), custom_end=utc(2026, 1, 2)),
    ):
        validate_period_fields(spec)


def test_unknown_timezone_is_a_config_error_in_period_bounds() -> None:
    with pytest.raises(ConfigError, match="Nowhere/City"):
        period_bounds(PeriodSpec("daily", timezone="Nowhere/City"), utc(2026, 1, 1))
