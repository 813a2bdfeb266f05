"""The global filters, kept in the URL's query string so a view can be shared as a link.

    ?range=7d&team=finance-ops&idle=usage
    ?range=custom&start=2026-11-01&end=2026-11-08

Keys: range (24h, 7d, 30d, mtd, custom), start/end (custom; ISO dates or datetimes, UTC; a
date as end includes that day), env, team, app, route, model, idle (separate, usage, even,
configured). Anything unknown or malformed falls back to the default and is reported, never a
crash. A custom range is clamped in one place, :func:`clamp_window` (issue #17: an end in year
9999 overflowed and failed every chart): no earlier than :data:`EARLIEST`, no later than a day
past the current hour, at most :data:`MAX_SPAN` long.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from urllib.parse import parse_qs, urlencode

from ledger import page_data
from ledger.queries import Filters
from models.idle_policy import DEFAULT_CHOICE, IDLE_CHOICES

PRESETS = {
    "24h": "Last 24 hours",
    "7d": "Last 7 days",
    "30d": "Last 30 days",
    "mtd": "Month to date",
}
DEFAULT_RANGE = "7d"
#: The earliest start a custom range may ask for: older than any ledger, and far enough from
#: datetime's year 1 that the previous-period comparisons (start - length) cannot overflow.
EARLIEST = datetime(2000, 1, 1, tzinfo=UTC)
#: The longest custom range: a bit over a year, enough for year-on-year views; longer ones cost
#: a full scan of the marts per chart and draw nothing readable.
MAX_SPAN = timedelta(days=400)
#: How far past the current hour a range may end: a custom range picked "through today" ends
#: at tomorrow's midnight, which should not raise a notice.
FUTURE_MARGIN = timedelta(days=1)
DEFAULT_POLICY = DEFAULT_CHOICE.value
#: The global equality filters, in the filter bar's order: URL key -> Filters field (which is
#: also the column of the marts it narrows), derived from the one map, ledger.page_data.
FILTER_FIELDS = {key: field for field, key in page_data.FILTER_KEYS.items()}
FILTER_KEYS = tuple(FILTER_FIELDS)
#: Each filter's label in the filter bar.
FILTER_LABELS = {
    "env": "Environment",
    "team": "Team",
    "app": "App",
    "route": "Route",
    "model": "Model",
}


@dataclass(frozen=True, slots=True)
class UrlState:
    """What the query string says, normalised: the filters and any complaint about it."""

    range: str
    start: str | None
    end: str | None
    values: dict[str, str | None]
    policy: str
    problems: tuple[str, ...] = ()

    def filters(self, now: datetime | None = None) -> Filters:
        now = now or datetime.now(UTC)
        end_of_hour = _end_of_hour(now)
        window = _custom_window(self.start, self.end, now) if self.range == "custom" else None
        if window is not None:
            start, end = window[0], window[1]
        elif self.range == "24h":
            start, end = end_of_hour - timedelta(days=1), end_of_hour
        elif self.range == "30d":
            start, end = end_of_hour - timedelta(days=30), end_of_hour
        elif self.range == "mtd":
            start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
            end = end_of_hour
        else:
            start, end = end_of_hour - timedelta(days=7), end_of_hour
        fields = {FILTER_FIELDS[k]: v for k, v in self.values.items() if v}
        return Filters(start=start, end=end, policy=self.policy, **fields)

    def query_string(self) -> str:
        pairs: list[tuple[str, str]] = [("range", self.range)]
        if self.range == "custom":
            pairs += [("start", self.start or ""), ("end", self.end or "")]
        pairs += [(k, v) for k, v in self.values.items() if v]
        if self.policy != DEFAULT_POLICY:
            pairs.append(("idle", self.policy))
        return "?" + urlencode(pairs)


def _end_of_hour(now: datetime) -> datetime:
    return now.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)


def _parse_when(text: str, *, end: bool = False) -> datetime:
    """An ISO date (a whole day; as an end, the day is included) or datetime, in UTC.
    Raises ValueError for anything else, out-of-range dates included."""
    try:
        if len(text) == 10:
            day = date.fromisoformat(text)
            moment = datetime(day.year, day.month, day.day, tzinfo=UTC)
            # The day after 9999-12-31 does not exist; such an end is clamped anyway.
            return moment + timedelta(days=1) if end and day < date.max else moment
        moment = datetime.fromisoformat(text)
        return moment.astimezone(UTC) if moment.tzinfo else moment.replace(tzinfo=UTC)
    except OverflowError:
        # e.g. 0001-01-01T00:00+05:00 is before year 1 in UTC: out of range, not a crash.
        raise ValueError(f"{text} is out of range") from None


def _format_when(moment: datetime, *, end: bool = False) -> str:
    """The inverse of :func:`_parse_when`: a date when the moment is a midnight."""
    if moment.time() == datetime.min.time():
        return (moment - timedelta(days=1) if end else moment).date().isoformat()
    return moment.strftime("%Y-%m-%dT%H:%M")


def clamp_window(
    start: datetime, end: datetime, now: datetime
) -> tuple[datetime, datetime, tuple[str, ...]]:
    """The one place a requested window [start, end) is made safe to query: an end past the
    current hour plus :data:`FUTURE_MARGIN` comes back to it, a start before :data:`EARLIEST`
    forward to it, and a window longer than :data:`MAX_SPAN` keeps its most recent part.
    Returns the window and what was changed, in words. Raises ValueError when nothing of
    the window is left (it lies wholly in the future, or before EARLIEST) or end <= start."""
    if end <= start:
        raise ValueError(f"end {_format_when(end, end=True)} is not after start")
    notes: list[str] = []
    latest = _end_of_hour(now) + FUTURE_MARGIN
    if end > latest:
        end = latest
        notes.append(f"end moved back to {latest:%Y-%m-%d %H:%M} UTC")
    if start < EARLIEST:
        start = EARLIEST
        notes.append(f"start moved forward to {EARLIEST:%Y-%m-%d}")
    if end <= start:
        raise ValueError("the range holds no time between 2000 and now")
    if end - start > MAX_SPAN:
        start = end - MAX_SPAN
        notes.append(f"shortened to the last {MAX_SPAN.days} days")
    return start, end, tuple(notes)


def _custom_window(
    start: str | None, end: str | None, now: datetime
) -> tuple[datetime, datetime, tuple[str, ...]] | None:
    """A custom range's window, clamped; None when it is missing or unusable."""
    if not start or not end:
        return None
    try:
        return clamp_window(_parse_when(start), _parse_when(end, end=True), now)
    except ValueError:
        return None


def parse(search: str | None, now: datetime | None = None) -> UrlState:
    """The state in a query string ("?a=b&..."); bad parts are dropped and named in problems.
    A custom range comes back clamped (:func:`clamp_window`, as of `now`), so the date
    pickers and links show the window the charts draw."""
    raw = parse_qs((search or "").lstrip("?"), keep_blank_values=False)
    first = {k: v[0] for k, v in raw.items() if v}
    problems: list[str] = []
    range_ = first.get("range", DEFAULT_RANGE)
    if range_ not in (*PRESETS, "custom"):
        problems.append(f"unknown time range {range_!r}: showing the last 7 days")
        range_ = DEFAULT_RANGE
    start, end = first.get("start"), first.get("end")
    if range_ == "custom":
        try:
            if not start or not end:
                raise ValueError("a custom range needs start and end")
            begin, until = _parse_when(start), _parse_when(end, end=True)
            if until <= begin:
                raise ValueError(f"end {end} is not after start {start}")
            begin, until, notes = clamp_window(begin, until, now or datetime.now(UTC))
        except ValueError as exc:
            problems.append(f"bad custom range ({exc}): showing the last 7 days")
            range_, start, end = DEFAULT_RANGE, None, None
        else:
            if notes:
                problems.append(f"custom range {start} to {end}: {', '.join(notes)}")
                start, end = _format_when(begin), _format_when(until, end=True)
    policy = first.get("idle", DEFAULT_POLICY)
    if policy not in IDLE_CHOICES:
        problems.append(f"unknown idle policy {policy!r}: using {DEFAULT_POLICY}")
        policy = DEFAULT_POLICY
    values = {k: first.get(k) or None for k in FILTER_KEYS}
    return UrlState(range_, start, end, values, policy, tuple(problems))


def filters_from(search: str | None, now: datetime | None = None) -> Filters:
    return parse(search, now).filters(now)
