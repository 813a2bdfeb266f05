"""Coverage of a range: how much of the time the deployments' replicas ran was scraped, and where
requests ran with no scrape behind them (issue #10, §1).

The refresher writes ``mart_coverage_hourly`` (sql/marts/allocation.sql, step w_coverage) per
deployment x hour; this module reads it for the page filters and merges the incomplete hours of
each deployment into contiguous stretches, so a page can say "r-chat 02:00–06:00 not scraped,
1,204 requests estimated" instead of presenting a partial range as complete. Definitions:
docs/cost-model.md, "Coverage".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from ledger.queries import Filters, run

if TYPE_CHECKING:
    from inferledger.core.storage import Storage

HOUR = timedelta(hours=1)
#: An hour is complete when at most this many replica-seconds of the expected ones went
#: unscraped (scrape timestamps are whole seconds apart from the hour edges) and no request
#: ran without a scrape.
TOLERANCE_S = 1.0


@dataclass(frozen=True, slots=True)
class Stretch:
    """Contiguous incomplete hours of one deployment: [start, end)."""

    deployment: str
    start: datetime
    end: datetime
    expected_s: float
    scraped_s: float
    requests: int
    uncovered_requests: int
    estimated_cost: float
    unpriced_requests: int

    @property
    def fraction(self) -> float | None:
        """Scraped ÷ expected replica-seconds (0..1); None when nothing was expected."""
        return self.scraped_s / self.expected_s if self.expected_s > 0 else None


@dataclass(frozen=True, slots=True)
class Coverage:
    """Coverage of one range of hours, over the deployments the filters select."""

    start: datetime
    end: datetime
    expected_s: float
    scraped_s: float
    requests: int
    uncovered_requests: int
    estimated_cost: float
    unpriced_requests: int
    stretches: tuple[Stretch, ...]
    first_hour: datetime | None  # the ledger's first hour with data, whatever the filters

    @property
    def fraction(self) -> float | None:
        """Scraped ÷ expected replica-seconds over the range; None when nothing was expected."""
        return self.scraped_s / self.expected_s if self.expected_s > 0 else None

    @property
    def complete(self) -> bool:
        return not self.stretches

    @property
    def incomplete_hours(self) -> frozenset[datetime]:
        """Every hour start inside a stretch, of any deployment."""
        hours: set[datetime] = set()
        for s in self.stretches:
            h = s.start
            while h < s.end:
                hours.add(h)
                h += HOUR
        return frozenset(hours)


def _utc(value: datetime) -> datetime:
    return value.astimezone(UTC)


def hour_incomplete(row: Mapping[str, Any]) -> bool:
    """An hour of a deployment is incomplete when replica time it expected went unscraped or a
    request ran there with no scrape behind it."""
    expected = float(row["expected_s"] or 0)
    scraped = float(row["scraped_s"] or 0)
    return scraped < expected - TOLERANCE_S or int(row["uncovered_requests"] or 0) > 0


def merge_stretches(rows: Iterable[Mapping[str, Any]]) -> list[Stretch]:
    """The incomplete hours of `rows` (mart_coverage_hourly rows), contiguous hours of one
    deployment merged; ordered by start, then deployment."""
    out: list[Stretch] = []
    open_by_dep: dict[str, Stretch] = {}
    for r in sorted(rows, key=lambda r: (r["deployment"], _utc(r["hour"]))):
        if not hour_incomplete(r):
            continue
        hour = _utc(r["hour"])
        dep = r["deployment"]
        prev = open_by_dep.get(dep)
        if prev is not None and prev.end == hour:
            merged = Stretch(
                dep,
                prev.start,
                hour + HOUR,
                prev.expected_s + float(r["expected_s"]),
                prev.scraped_s + float(r["scraped_s"]),
                prev.requests + int(r["requests"]),
                prev.uncovered_requests + int(r["uncovered_requests"]),
                prev.estimated_cost + float(r["estimated_cost"]),
                prev.unpriced_requests + int(r["unpriced_requests"]),
            )
            out[-1] = merged
        else:
            merged = Stretch(
                dep,
                hour,
                hour + HOUR,
                float(r["expected_s"]),
                float(r["scraped_s"]),
                int(r["requests"]),
                int(r["uncovered_requests"]),
                float(r["estimated_cost"]),
                int(r["unpriced_requests"]),
            )
            out.append(merged)
        open_by_dep[dep] = merged
    return sorted(out, key=lambda s: (s.start, s.deployment))


def summarize(
    rows: Sequence[Mapping[str, Any]],
    start: datetime,
    end: datetime,
    first_hour: datetime | None = None,
) -> Coverage:
    """The coverage of [start, end) from its mart_coverage_hourly rows (pure: tests and pages
    share it)."""
    return Coverage(
        start=_utc(start),
        end=_utc(end),
        expected_s=sum(float(r["expected_s"]) for r in rows),
        scraped_s=sum(float(r["scraped_s"]) for r in rows),
        requests=sum(int(r["requests"]) for r in rows),
        uncovered_requests=sum(int(r["uncovered_requests"]) for r in rows),
        estimated_cost=sum(float(r["estimated_cost"]) for r in rows),
        unpriced_requests=sum(int(r["unpriced_requests"]) for r in rows),
        stretches=tuple(merge_stretches(rows)),
        first_hour=_utc(first_hour) if first_hour is not None else None,
    )


def first_hour(storage: Storage, filters: Filters) -> datetime | None:
    """The ledger's first hour with any data (spend or replica time), whatever the filters."""
    row = run(storage, "coverage_first_hour", filters).to_pylist()[0]
    return _utc(row["first_hour"]) if row["first_hour"] is not None else None


def coverage(storage: Storage, filters: Filters) -> Coverage:
    """The coverage of the filters' range (deployments selected by environment and model)."""
    rows = run(storage, "coverage_hours", filters).to_pylist()
    return summarize(rows, filters.start, filters.end, first_hour(storage, filters))


@dataclass(frozen=True, slots=True)
class Comparison:
    """Whether a previous period can be compared with the current one (top movers, forecast's
    run rate): not when it holds less of its data than the current one, or when the ledger's
    data begins inside it, since a half-loaded baseline reads as growth ("traffic +309533 %")."""

    current: Coverage
    previous: Coverage

    @property
    def starts_inside(self) -> bool:
        first = self.previous.first_hour
        return first is None or first > self.previous.start

    @property
    def comparable(self) -> bool:
        if self.starts_inside:
            return False
        cur, prev = self.current.fraction, self.previous.fraction
        if prev is not None and cur is not None and prev < cur - 0.01:
            return False
        # requests ran unscraped in the baseline but not now: its GPU cost is partly estimated
        return not (self.previous.uncovered_requests > 0 and self.current.uncovered_requests == 0)

    def reason(self) -> str | None:
        """One line saying why the comparison is not shown; None when it is comparable."""
        if self.comparable:
            return None
        span = f"{self.previous.start:%Y-%m-%d %H:%M}–{self.previous.end:%Y-%m-%d %H:%M} UTC"
        if self.starts_inside:
            first = self.previous.first_hour
            since = f"data begins {first:%Y-%m-%d %H:%M} UTC" if first else "no data"
            return f"The comparison period ({span}) is incomplete: {since}."
        prev = self.previous.fraction
        cur = self.current.fraction
        return (
            f"The comparison period ({span}) is incomplete: {_pct(prev)} of its GPU time "
            f"scraped against {_pct(cur)} now"
            + (
                f"; {self.previous.uncovered_requests:,} requests ran without scrapes"
                if self.previous.uncovered_requests
                else ""
            )
            + "."
        )


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{value:.0%}"


def compare_previous(storage: Storage, filters: Filters) -> Comparison:
    """The coverage of the filters' range and of the period of the same length before it."""
    length = filters.end - filters.start
    previous = filters.with_(start=filters.start - length, end=filters.start)
    return Comparison(coverage(storage, filters), coverage(storage, previous))
