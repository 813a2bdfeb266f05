"""Budget periods (issue #12): the [start, end) window a budget's spend is counted in.

A period resets at 00:00 local time in the budget's IANA time zone, so a "daily" budget in
Europe/Berlin runs from Berlin midnight to Berlin midnight — 23 h on the spring DST day, 25 h
on the autumn one. Bounds are returned as UTC-aware datetimes.

Periods: ``daily``; ``weekly`` from ``week_start`` (0 = Monday … 6 = Sunday); ``monthly`` from
``reset_day`` (1-28, so every month has it); ``quarterly`` from ``reset_day`` of January,
April, July and October; ``custom`` is [custom_start, custom_end) whatever ``at`` is.

Anything with the :class:`models.alert_config.Budget` period field names is a spec (duck
typing): period, timezone, week_start, reset_day, custom_start, custom_end. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from models.alert_config import PERIODS, ConfigError

QUARTER_MONTHS = (1, 4, 7, 10)


class PeriodFields(Protocol):
    """The fields of a budget that define its period (:class:`models.alert_config.Budget`)."""

    @property
    def period(self) -> str: ...
    @property
    def timezone(self) -> str: ...
    @property
    def week_start(self) -> int: ...
    @property
    def reset_day(self) -> int: ...
    @property
    def custom_start(self) -> datetime | None: ...
    @property
    def custom_end(self) -> datetime | None: ...


@dataclass(frozen=True)
class PeriodSpec:
    """A period on its own (for callers that have the fields but no Budget)."""

    period: str
    timezone: str = "UTC"
    week_start: int = 0
    reset_day: int = 1
    custom_start: datetime | None = None
    custom_end: datetime | None = None


def zone(name: str) -> ZoneInfo:
    """The IANA time zone ``name``; ConfigError naming it when unknown."""
    if not isinstance(name, str) or not name or name != name.strip():
        raise ConfigError(f"timezone {name!r} is not an IANA time zone name (e.g. Europe/Berlin)")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise ConfigError(
            f"unknown timezone {name!r}: use an IANA name such as UTC, Europe/Berlin or "
            "America/New_York"
        ) from None


def validate_period_fields(spec: PeriodFields) -> None:
    """Raise ConfigError saying what is wrong with a spec's period fields: an unknown period
    or time zone, week_start outside 0-6, reset_day outside 1-28, a custom period without both
    ends, with a naive end, or ending before (or when) it starts."""
    if spec.period not in PERIODS:
        raise ConfigError(f"unknown period {spec.period!r}: use one of {', '.join(PERIODS)}")
    zone(spec.timezone)
    if not isinstance(spec.week_start, int) or not 0 <= spec.week_start <= 6:
        raise ConfigError(
            f"week_start {spec.week_start!r} is out of range: 0 (Monday) to 6 (Sunday)"
        )
    if not isinstance(spec.reset_day, int) or not 1 <= spec.reset_day <= 28:
        raise ConfigError(
            f"reset_day {spec.reset_day!r} is out of range: 1 to 28 (a day every month has)"
        )
    if spec.period == "custom":
        start, end = spec.custom_start, spec.custom_end
        if start is None or end is None:
            raise ConfigError("a custom period needs both custom_start and custom_end")
        for label, value in (("custom_start", start), ("custom_end", end)):
            if value.utcoffset() is None:
                raise ConfigError(f"{label} {value.isoformat()} has no time zone offset")
        if end <= start:
            raise ConfigError(
                f"custom_end {end.isoformat()} is not after custom_start {start.isoformat()}"
            )


def _aware(at: datetime, what: str = "at") -> datetime:
    if at.utcoffset() is None:
        raise ValueError(f"{what} must be timezone-aware, got {at.isoformat()}")
    return at


def local_midnight(day: date, tz: ZoneInfo) -> datetime:
    """The first instant of ``day`` in ``tz``, in UTC. Where DST starts at midnight (00:00 does
    not exist), zoneinfo's fold=0 reading maps it to the first instant that does; where it
    ends at midnight (00:00 happens twice), fold=0 is the first of the two."""
    return datetime.combine(day, time(0), tzinfo=tz).astimezone(UTC)


def _add_months(year: int, month: int, months: int) -> tuple[int, int]:
    index = year * 12 + (month - 1) + months
    return index // 12, index % 12 + 1


def _start_day(spec: PeriodFields, local: date) -> date:
    """The local date the period containing local date ``local`` starts on."""
    if spec.period == "daily":
        return local
    if spec.period == "weekly":
        return local - timedelta(days=(local.weekday() - spec.week_start) % 7)
    reset = spec.reset_day
    if spec.period == "monthly":
        year, month = local.year, local.month
        if local.day < reset:
            year, month = _add_months(year, month, -1)
        return date(year, month, reset)
    if spec.period == "quarterly":
        year, month = local.year, QUARTER_MONTHS[(local.month - 1) // 3]
        if (local.month, local.day) < (month, reset):
            year, month = _add_months(year, month, -3)
        return date(year, month, reset)
    raise ConfigError(f"unknown period {spec.period!r}: use one of {', '.join(PERIODS)}")


def _end_day(spec: PeriodFields, start: date) -> date:
    if spec.period == "daily":
        return start + timedelta(days=1)
    if spec.period == "weekly":
        return start + timedelta(days=7)
    months = 1 if spec.period == "monthly" else 3
    year, month = _add_months(start.year, start.month, months)
    return date(year, month, start.day)


def period_bounds(spec: PeriodFields, at: datetime) -> tuple[datetime, datetime]:
    """[start, end) in UTC of the period of ``spec`` that contains the instant ``at`` (aware;
    a naive ``at`` is a ValueError). A custom period returns its own bounds even when ``at``
    falls outside them: it has only one period."""
    _aware(at)
    if spec.period == "custom":
        if spec.custom_start is None or spec.custom_end is None:
            raise ConfigError("a custom period needs both custom_start and custom_end")
        return (
            _aware(spec.custom_start, "custom_start").astimezone(UTC),
            _aware(spec.custom_end, "custom_end").astimezone(UTC),
        )
    tz = zone(spec.timezone)
    start_day = _start_day(spec, at.astimezone(tz).date())
    return local_midnight(start_day, tz), local_midnight(_end_day(spec, start_day), tz)


def previous_period(spec: PeriodFields, start: datetime) -> tuple[datetime, datetime]:
    """The period just before the one starting at ``start``. For a custom period: the span of
    the same length that ends at its start (for "vs the previous period" comparisons)."""
    _aware(start, "start")
    if spec.period == "custom":
        begin, end = period_bounds(spec, start)
        return begin - (end - begin), begin
    return period_bounds(spec, start - timedelta(microseconds=1))


def next_period(spec: PeriodFields, end: datetime) -> tuple[datetime, datetime]:
    """The period that starts at ``end`` (the end of the current one). Custom: the span of the
    same length after it."""
    _aware(end, "end")
    if spec.period == "custom":
        begin, finish = period_bounds(spec, end)
        return finish, finish + (finish - begin)
    return period_bounds(spec, end)


def periods_between(
    spec: PeriodFields, start: datetime, end: datetime
) -> Iterator[tuple[datetime, datetime]]:
    """Every period that overlaps [start, end), oldest first (a custom period: its one period
    if it overlaps)."""
    _aware(start, "start")
    _aware(end, "end")
    if end <= start:
        return
    if spec.period == "custom":
        begin, finish = period_bounds(spec, start)
        if begin < end and start < finish:
            yield begin, finish
        return
    bounds = period_bounds(spec, start)
    while bounds[0] < end:
        yield bounds
        bounds = period_bounds(spec, bounds[1])


def elapsed_fraction(bounds: tuple[datetime, datetime], at: datetime) -> float:
    """How much of the period [start, end) has passed at ``at``, clamped to 0..1."""
    start, end = bounds
    total = (end - start).total_seconds()
    return min(max((_aware(at) - start).total_seconds() / total, 0.0), 1.0)
