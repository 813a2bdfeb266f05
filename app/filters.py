"""The global filters, kept in the URL's query string so a view can be shared as a link.

    ?range=7d&team=finance-ops&idle=usage
    ?range=custom&start=2026-11-01&end=2026-11-08
    ?range=lastweek&by=route&refresh=60

Keys: range (24h, 7d, 30d; the calendar presets today, yesterday, wtd, lastweek, mtd,
lastmonth, in UTC with weeks starting on Monday; custom), start/end (custom; ISO dates or
datetimes, UTC; a date as end includes that day), env, team, app, route, model, idle
(separate, usage, even, configured), refresh (auto-refresh every N seconds), and the
page-level choices of :data:`PAGE_KEYS` (Spend's breakdown `by`, Unit economics'
`models_of`, the budget whose detail the Budgets page shows). Anything unknown or malformed
falls back to the default and is reported, never a crash. A custom range is clamped in one
place, :func:`clamp_window` (issue #17: an end in year 9999 overflowed and failed every
chart): no earlier than :data:`EARLIEST`, no later than a day past the current hour, at most
:data:`MAX_SPAN` long. :meth:`UrlState.absolute` turns
any range into the custom range it stands for now, so a link copied on Monday shows the same
numbers on Friday (issue #10).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime, timedelta
from urllib.parse import parse_qs, urlencode

from inferledger.core.times import as_utc
from ledger import page_data
from ledger.queries import Filters
from models.idle_policy import DEFAULT_CHOICE, IDLE_CHOICES

#: The filter bar's id prefix (filter-range, filter-team, ...); app.shell lays it out.
FILTER_ID = "filter"
PRESETS = {
    "24h": "Last 24 hours",
    "7d": "Last 7 days",
    "30d": "Last 30 days",
    "today": "Today",
    "yesterday": "Yesterday",
    "wtd": "Week to date",
    "lastweek": "Last week",
    "mtd": "Month to date",
    "lastmonth": "Last month",
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
#: Page-level choices kept in the URL beside the filters, so a reload, the navigation and a
#: copied link keep them (issue #10): Spend's breakdown dimension and Overview's movers are
#: both `by`; `models_of` is the workflow whose models Unit economics sets side by side (not
#: `workflow`: that names a dimension a global filter may take one day, and a filter narrows
#: every chart while this picks one card's subject). The page that reads one validates it
#: (:meth:`UrlState.choice`): a value it does not offer (another page's) falls back to its
#: default.
PAGE_KEYS = ("by", "models_of", "budget")
#: What a page-level value may hold: a dimension, or a name from the data such as a workflow
#: (words in any script, spaces, and . : / @ + -); anything else is dropped with a notice.
_PAGE_VALUE = re.compile(r"[\w .:/@+-]{1,128}")
#: Auto-refresh: the interval the filter bar's toggle sets, and the bounds a URL may ask for.
REFRESH_SECONDS = 60
REFRESH_BOUNDS = (10, 3600)
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
    #: Page-level choices (keys of :data:`PAGE_KEYS`), as written; pages validate them.
    page: dict[str, str] = field(default_factory=dict)
    #: Auto-refresh interval in seconds; None is off (the default).
    refresh: int | None = None

    def filters(self, now: datetime | None = None) -> Filters:
        now = now or datetime.now(UTC)
        window = _custom_window(self.start, self.end, now) if self.range == "custom" else None
        if window is not None:
            start, end = window[0], window[1]
        else:
            start, end = preset_window(self.range, now)
        fields = {FILTER_FIELDS[k]: v for k, v in self.values.items() if v}
        return Filters(start=start, end=end, policy=self.policy, **fields)

    def choice(self, key: str, choices: tuple[str, ...] | list[str], default: str) -> str:
        """A page-level choice from the URL, or `default` when absent or not one of `choices`."""
        value = self.page.get(key)
        return value if value in choices else default

    def with_choice(self, key: str, value: str | None) -> UrlState:
        """The same state with a page-level choice set (None removes it)."""
        if key not in PAGE_KEYS:
            raise ValueError(f"{key!r} is not a page-level URL key ({', '.join(PAGE_KEYS)})")
        page = {k: v for k, v in self.page.items() if k != key}
        if value:
            page[key] = value
        return replace(self, page=page, problems=())

    def absolute(self, now: datetime | None = None) -> UrlState:
        """The same view with its range as the custom window it covers now, in whole
        datetimes: a preset like "last 7 days" moves with the clock, the copy does not."""
        filters = self.filters(now)
        return replace(
            self,
            range="custom",
            start=filters.start.strftime("%Y-%m-%dT%H:%M"),
            end=filters.end.strftime("%Y-%m-%dT%H:%M"),
            problems=(),
            refresh=None,  # a fixed past window has nothing new to fetch
        )

    def query_string(self) -> str:
        pairs: list[tuple[str, str]] = [("range", self.range)]
        if self.range == "custom":
            pairs += [("start", self.start or ""), ("end", self.end or "")]
        pairs += [(k, v) for k, v in self.values.items() if v]
        if self.policy != DEFAULT_POLICY:
            pairs.append(("idle", self.policy))
        pairs += [(k, self.page[k]) for k in PAGE_KEYS if self.page.get(k)]
        if self.refresh:
            pairs.append(("refresh", str(self.refresh)))
        # ":" left as is: the datetimes of a custom range stay readable in a shared link.
        return "?" + urlencode(pairs, safe=":")


def preset_window(range_: str, now: datetime) -> tuple[datetime, datetime]:
    """The window [start, end) a preset covers at `now`, in UTC. Rolling presets and the
    "to date" ones end with the current hour (the hour in progress is included); yesterday,
    last week and last month are whole calendar periods. Weeks start on Monday. An unknown
    preset is the default, the last 7 days."""
    now = now.astimezone(UTC)
    end_of_hour = _end_of_hour(now)
    midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
    monday = midnight - timedelta(days=midnight.weekday())
    first = midnight.replace(day=1)
    if range_ == "24h":
        return end_of_hour - timedelta(days=1), end_of_hour
    if range_ == "30d":
        return end_of_hour - timedelta(days=30), end_of_hour
    if range_ == "today":
        return midnight, end_of_hour
    if range_ == "yesterday":
        return midnight - timedelta(days=1), midnight
    if range_ == "wtd":
        return monday, end_of_hour
    if range_ == "lastweek":
        return monday - timedelta(days=7), monday
    if range_ == "mtd":
        return first, end_of_hour
    if range_ == "lastmonth":
        return (first - timedelta(days=1)).replace(day=1), first
    return end_of_hour - timedelta(days=7), end_of_hour


def zoomed(state: UrlState, x0: str, x1: str, now: datetime | None = None) -> UrlState:
    """The state narrowed to a zoomed time axis [x0, x1] (a chart's drag-to-zoom, plotly's
    date strings such as "2026-11-25 03:12:33.1234"): widened to whole hours when the span is
    at least :data:`ZOOM_HOURS_FROM`, else to whole minutes, then clamped (:func:`clamp_window`).
    Raises ValueError when x0/x1 are not datetimes (the axis is not time) or nothing is left."""
    a, b = sorted((_parse_when(x0), _parse_when(x1)))
    step = timedelta(hours=1) if b - a >= ZOOM_HOURS_FROM else timedelta(minutes=1)
    start, end = _floor(a, step), _floor(b, step)
    if end < b or end == start:
        end += step  # round the end up: the zoomed span stays inside the window
    start, end, _notes = clamp_window(start, end, now or datetime.now(UTC))
    return replace(
        state,
        range="custom",
        start=start.strftime("%Y-%m-%dT%H:%M"),
        end=end.strftime("%Y-%m-%dT%H:%M"),
        problems=(),
    )


#: A zoom spanning at least this long snaps to whole hours (the marts' grain), else minutes.
ZOOM_HOURS_FROM = timedelta(hours=3)


def _floor(moment: datetime, step: timedelta) -> datetime:
    moment = moment.replace(second=0, microsecond=0)
    return moment.replace(minute=0) if step >= timedelta(hours=1) else moment


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
        return as_utc(moment)
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
    page = {k: first[k] for k in PAGE_KEYS if k in first}
    for key, value in list(page.items()):
        if not _PAGE_VALUE.fullmatch(value):
            problems.append(f"bad {key} {value[:40]!r}: using the page's default")
            del page[key]
    refresh = _refresh(first.get("refresh"), problems)
    return UrlState(range_, start, end, values, policy, tuple(problems), page, refresh)


def _refresh(text: str | None, problems: list[str]) -> int | None:
    """The auto-refresh interval in seconds, within :data:`REFRESH_BOUNDS`; None is off."""
    if not text or text in ("0", "off"):
        return None
    low, high = REFRESH_BOUNDS
    if not text.isdigit() or not low <= int(text) <= high:
        problems.append(f"bad refresh {text[:20]!r}: auto-refresh is every {low} to {high} s")
        return None
    return int(text)


def filters_from(search: str | None, now: datetime | None = None) -> Filters:
    return parse(search, now).filters(now)
