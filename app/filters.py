"""The global filters, kept in the URL's query string so a view can be shared as a link.

    ?range=7d&team=finance-ops&idle=usage
    ?range=custom&start=2026-11-01&end=2026-11-08

Keys: range (24h, 7d, 30d, mtd, custom), start/end (custom; ISO dates or datetimes, UTC; end
exclusive), env, team, app, route, model, idle (separate, usage, even, configured). Anything
unknown or malformed falls back to the default and is reported, never a crash.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from urllib.parse import parse_qs, urlencode

from models.ledger_queries import IDLE_POLICIES, Filters

PRESETS = {
    "24h": "Last 24 hours",
    "7d": "Last 7 days",
    "30d": "Last 30 days",
    "mtd": "Month to date",
}
DEFAULT_RANGE = "7d"
DEFAULT_POLICY = "configured"
FILTER_KEYS = ("env", "team", "app", "route", "model")
_FILTER_FIELDS = {
    "env": "environment",
    "team": "team",
    "app": "app",
    "route": "route",
    "model": "model",
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
        end_of_hour = now.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
        if self.range == "custom" and self.start and self.end:
            start, end = _parse_when(self.start), _parse_when(self.end, end=True)
        elif self.range == "24h":
            start, end = end_of_hour - timedelta(days=1), end_of_hour
        elif self.range == "30d":
            start, end = end_of_hour - timedelta(days=30), end_of_hour
        elif self.range == "mtd":
            start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
            end = end_of_hour
        else:
            start, end = end_of_hour - timedelta(days=7), end_of_hour
        fields = {_FILTER_FIELDS[k]: v for k, v in self.values.items() if v}
        return Filters(start=start, end=end, policy=self.policy, **fields)

    def query_string(self) -> str:
        pairs: list[tuple[str, str]] = [("range", self.range)]
        if self.range == "custom":
            pairs += [("start", self.start or ""), ("end", self.end or "")]
        pairs += [(k, v) for k, v in self.values.items() if v]
        if self.policy != DEFAULT_POLICY:
            pairs.append(("idle", self.policy))
        return "?" + urlencode(pairs)


def _parse_when(text: str, *, end: bool = False) -> datetime:
    """An ISO date (a whole day; as an end, the day is included) or datetime, in UTC."""
    if len(text) == 10:
        day = date.fromisoformat(text)
        moment = datetime(day.year, day.month, day.day, tzinfo=UTC)
        return moment + timedelta(days=1) if end else moment
    moment = datetime.fromisoformat(text)
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def parse(search: str | None) -> UrlState:
    """The state in a query string ("?a=b&..."); bad parts are dropped and named in problems."""
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
            if _parse_when(end, end=True) <= _parse_when(start):
                raise ValueError(f"end {end} is not after start {start}")
        except ValueError as exc:
            problems.append(f"bad custom range ({exc}): showing the last 7 days")
            range_, start, end = DEFAULT_RANGE, None, None
    policy = first.get("idle", DEFAULT_POLICY)
    if policy not in IDLE_POLICIES:
        problems.append(f"unknown idle policy {policy!r}: using {DEFAULT_POLICY}")
        policy = DEFAULT_POLICY
    values = {k: first.get(k) or None for k in FILTER_KEYS}
    return UrlState(range_, start, end, values, policy, tuple(problems))


def filters_from(search: str | None, now: datetime | None = None) -> Filters:
    return parse(search).filters(now)
