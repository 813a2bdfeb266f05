"""The refresher: keeps the cost marts fresh, recomputing only the hours whose inputs changed.

What makes an hour dirty (docs/cost-model.md, docs/operations.md):

- spans received since the last run: the hours they start and end in;
- scrapes received since the last run (history replays and late targets included);
- a price book change: every hour with data from the change's ``effective_from`` on;
- a change of what is known about deployments and replicas (config, learned GPU types, idle
  policy): every hour with data;
- outcomes posted since the last run: the hours of their tasks.

Each run reads its watermarks inside a write operation (the writer is the only one who writes,
so nothing committed is missed), then recomputes the dirty hours in windows of at most
``max_window_hours`` contiguous hours, each window one write transaction, so ingest interleaves
with a long rebuild. A run with more than ``backfill_window_hours`` (72) dirty hours — a history
load, a price change, a full rebuild — uses windows of that many hours instead: each window
carries about a second of fixed work (its temporary tables, the reads of neighbouring hours),
and the demo's week (169 hours, 840,000 requests) was rebuilt in 26.5 s in 72-hour windows
against 32.8 s in 24-hour and 56 s in 6-hour ones, at the same peak memory (DuckDB's
memory_limit bounds it; docs/benchmarks.md), while ingest, which spools, waits at most one
such window (about 9 s there). A window is all-or-nothing.

One failing window does not stop the others (issue #17: one span near 2^63-1 ns, stored before
ingest checked times, overflowed its hour and so every refresh). A window that fails on its
data is retried hour by hour; the hours that still fail are logged (one line each), counted in
``RefreshResult.failed`` and the ``inferledger_ledger_failed_hours`` gauge, and recorded in
``mart_refresh_state`` (``failed_hour:<ns>`` rows), so the next run retries them while the
watermarks move on. The hour from 2262-04-11T23:00Z, whose end int64 nanoseconds cannot hold, is
never computed: its spans are reported once, as a failed hour that is not retried. Errors of
the storage itself (closed, overloaded) still fail the whole run and leave the watermarks where
they were; so does a failure while planning or saving a run (RefreshError).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from inferledger.core.errors import InferLedgerError, QueryError, one_line
from ledger.allocation import DEFAULT_MAX_SCRAPE_GAP_NS, HOUR_NS, allocate_window
from ledger.deployments import learn_replicas
from ledger.efficiency import dirty_cache_hours, refresh_cache_hours, refresh_latency_hours
from ledger.unit_economics import refresh_tasks_for_outcomes, refresh_tasks_window

if TYPE_CHECKING:
    from inferledger.core.service_metrics import ServiceMetrics
    from inferledger.core.storage import Storage, Transaction

log = logging.getLogger(__name__)

#: Hooks run after allocate_window for the same window, in the same transaction:
#: fn(tx, h0_ns, h1_ns). Efficiency and task marts register here (see _window_hooks()).
WindowHook = Callable[["Transaction", int, int], Any]

#: What a window's own data can make the marts' SQL and maths raise (an overflow, a value out
#: of range). Anything else, StorageError included, fails the whole run as before.
_WINDOW_ERRORS = (QueryError, ArithmeticError, ValueError)
_FAILED_PREFIX = "failed_hour:"
#: The last hour whose end fits in int64 nanoseconds. The next one (2262-04-11T23:00Z) cannot be
#: computed at all, with or without data: its spans are reported, never retried.
_LAST_HOUR_NS = ((2**63 - 1) // HOUR_NS - 1) * HOUR_NS
_BEYOND_INT64 = (
    "spans start or end in the last hour int64 nanoseconds can hold, which the ledger cannot "
    "compute; they are left out (ingest rejects such times since issue #17)"
)


class RefreshError(InferLedgerError):
    """A refresh failed outside any one window (planning, saving); ``str(exc)`` is one line."""


@dataclass(frozen=True, slots=True)
class FailedHour:
    """An hour whose marts could not be recomputed; retried on the next run, except the last
    hour of int64 nanoseconds, which no run can compute (``retried`` is False)."""

    hour_ns: int
    error: str  # one line

    @property
    def when(self) -> str:
        return hour_text(self.hour_ns)

    @property
    def retried(self) -> bool:
        return self.hour_ns <= _LAST_HOUR_NS


@dataclass(frozen=True, slots=True)
class RefreshResult:
    hours: int
    windows: int
    requests: int
    seconds: float
    reasons: tuple[str, ...] = field(default=())
    failed: tuple[FailedHour, ...] = field(default=())


def hour_text(hour_ns: int) -> str:
    """``2026-05-28T14:00Z`` for an hour start in Unix ns (any int64 one)."""
    try:
        return datetime.fromtimestamp(hour_ns // 1_000_000_000, UTC).strftime("%Y-%m-%dT%H:%MZ")
    except (OverflowError, ValueError, OSError):
        return f"the hour at {hour_ns} ns"


@dataclass(frozen=True, slots=True)
class _Plan:
    hours: tuple[int, ...]  # hour starts, Unix ns, sorted: every mart recomputed
    cache_hours: tuple[int, ...]  # only the scrape-side efficiency marts recomputed
    reasons: tuple[str, ...]
    marks: dict[str, Any]
    outcomes_since: datetime | None


def _state(tx: Transaction) -> dict[str, tuple[Any, Any]]:
    rows = tx.execute("select name, value_ts, value_int from mart_refresh_state").fetchall()
    return {name: (ts, num) for name, ts, num in rows}


def _deployments_fingerprint(tx: Transaction) -> int:
    (value,) = tx.execute(
        """
        select coalesce(hash(string_agg(
            concat_ws('|', replica, deployment, gpu_type, gpus, idle_policy, model),
            ',' order by replica)), 0)
        from deployment_replicas
        """
    ).fetchone() or (0,)
    return int(value) & 0x7FFF_FFFF_FFFF_FFFF


def _hours_with_data(tx: Transaction, from_ns: int) -> set[int]:
    rows = tx.execute(
        """
        select distinct epoch_ns(hour) from mart_spend_hourly where epoch_ns(hour) >= $f
        union
        select distinct epoch_ns(hour) from mart_replica_hours where epoch_ns(hour) >= $f
        """,
        {"f": from_ns},
    ).fetchall()
    return {int(h) for (h,) in rows}


def _received_mark(tx: Transaction, table: str) -> datetime | None:
    """The watermark to save for `table`: the newest received_at of an earlier transaction.

    Rows are stamped with their transaction's start time, and the writer may commit more
    operations in this very transaction after the refresher's, under the same stamp. So rows
    carrying this transaction's stamp are left above the mark: processed now if visible, and
    once more next run. Every row is processed at least once, and at most twice.
    """
    (mark,) = tx.execute(
        f"select max(received_at) from {table} where received_at < current_timestamp"
    ).fetchone() or (None,)
    return mark


def _plan(tx: Transaction, *, full: bool, max_scrape_gap_ns: int) -> _Plan:
    state = _state(tx)
    hours: set[int] = set()
    cache_hours: set[int] = set()
    reasons: list[str] = []
    marks: dict[str, Any] = {}

    spans_mark = None if full else state.get("spans_received", (None, None))[0]
    new_spans_mark = _received_mark(tx, "spans")
    if new_spans_mark is not None:
        rows = tx.execute(
            """
            select distinct h from (
                select start_ns // $H as h from spans
                where $m::timestamptz is null or received_at > $m
                union all
                select end_ns // $H as h from spans
                where $m::timestamptz is null or received_at > $m
            )
            """,
            {"H": HOUR_NS, "m": spans_mark},
        ).fetchall()
        if rows:
            hours.update(int(h) * HOUR_NS for (h,) in rows)
            reasons.append(f"spans ({len(rows)} h)")
        marks["spans_received"] = (new_spans_mark, None)

    scrapes_mark = None if full else state.get("scrapes_received", (None, None))[0]
    new_scrapes_mark = _received_mark(tx, "scrapes")
    if new_scrapes_mark is not None:
        # Allocation: a vLLM scrape changes the up time of its own hour and, at most the gap
        # later, the next; and when it ends a silence longer than the gap, the coverage of
        # every hour from its predecessor's on: the replica was expected through the silence
        # (its lifetime runs from first to last scrape), and hours with no scrape and no
        # request have no data of their own to make them dirty.
        rows = tx.execute(
            """
            with fresh as (
                select target, ts from scrapes
                where kind = 'vllm' and ($m::timestamptz is null or received_at > $m)
            ),
            with_prev as (
                select f.target, epoch_ns(f.ts) as t_ns, epoch_ns(p.ts) as prev_ns
                from fresh as f
                asof left join scrapes as p on p.target = f.target and p.ts < f.ts
            )
            select distinct h from (
                select unnest([t_ns // $H, (t_ns + $gap - 1) // $H]) as h from with_prev
                union all
                select unnest(range(prev_ns // $H, t_ns // $H)) as h
                from with_prev
                where t_ns - prev_ns > $gap
            )
            where h is not null
            """,
            {"m": scrapes_mark, "H": HOUR_NS, "gap": max_scrape_gap_ns},
        ).fetchall()
        hours.update(int(h) * HOUR_NS for (h,) in rows)
        # Cache, KV and GPU marts: efficiency.dirty_cache_hours knows what a scrape changes
        # there (counter increases end in the hour *before* a scrape exactly on the hour).
        touched = {epoch_ns(h) for h in dirty_cache_hours(tx, scrapes_mark)}
        if touched or rows:
            reasons.append(f"scrapes ({len(rows)} h)")
        cache_hours.update(touched)
        marks["scrapes_received"] = (new_scrapes_mark, None)

    last_change = state.get("price_change", (None, 0))[1] or 0
    row = tx.execute(
        """
        select max(change_id), min(epoch_ns(effective_from))
        from price_book_changes where change_id > $c
        """,
        {"c": last_change},
    ).fetchone()
    if row and row[0] is not None:
        marks["price_change"] = (None, int(row[0]))
        if last_change and not full:
            from_ns = int(row[1]) // HOUR_NS * HOUR_NS
            repriced = _hours_with_data(tx, from_ns)
            hours.update(repriced)
            reasons.append(f"prices ({len(repriced)} h)")

    fingerprint = _deployments_fingerprint(tx)
    old_fp = state.get("deployments", (None, None))[1]
    if old_fp != fingerprint:
        marks["deployments"] = (None, fingerprint)
        if old_fp is not None and not full:
            every = _hours_with_data(tx, 0)
            hours.update(every)
            reasons.append(f"deployments ({len(every)} h)")

    outcomes_since = None if full else state.get("outcomes_received", (None, None))[0]
    new_outcomes_mark = _received_mark(tx, "outcomes")
    if new_outcomes_mark is not None:
        rows = tx.execute(
            """
            with changed as (
                select task_id, trace_id from outcomes
                where $m::timestamptz is null or received_at > $m
            ),
            keys as (
                select task_id as task_key from changed where task_id is not null
                union
                select distinct r.task_key from mart_requests as r
                semi join changed as c on c.trace_id = r.trace_id
            )
            select distinct epoch_ns(hour) from mart_requests semi join keys using (task_key)
            union
            select distinct epoch_ns(hour) from mart_reviews semi join keys using (task_key)
            """,
            {"m": outcomes_since},
        ).fetchall()
        if rows:
            hours.update(int(h) for (h,) in rows)
            reasons.append(f"outcomes ({len(rows)} h)")
        marks["outcomes_received"] = (new_outcomes_mark, None)

    retry = tx.execute(
        "select value_int from mart_refresh_state where starts_with(name, $p)",
        {"p": _FAILED_PREFIX},
    ).fetchall()
    if retry:
        hours.update(int(h) for (h,) in retry)
        reasons.append(f"failed before ({len(retry)} h)")

    if full:
        reasons.insert(0, "full rebuild")
    return _Plan(
        tuple(sorted(hours)),
        tuple(sorted(cache_hours - hours)),
        tuple(reasons),
        marks,
        outcomes_since,
    )


def windows(hours: Sequence[int], max_hours: int) -> list[tuple[int, int]]:
    """Contiguous runs of hour starts as [h0, h1) windows of at most max_hours hours."""
    out: list[tuple[int, int]] = []
    for h in hours:
        if out and out[-1][1] == h and (h - out[-1][0]) // HOUR_NS < max_hours:
            out[-1] = (out[-1][0], h + HOUR_NS)
        else:
            out.append((h, h + HOUR_NS))
    return out


def _save_failed(tx: Transaction, failed: Sequence[FailedHour]) -> None:
    """Record this run's failed hours in place of the last run's: every hour recorded then was
    in this run's plan, so it either succeeded now or is recorded again."""
    tx.execute("delete from mart_refresh_state where starts_with(name, $p)", {"p": _FAILED_PREFIX})
    for item in failed:
        tx.execute(
            """
            insert or replace into mart_refresh_state (name, value_ts, value_int, updated_at)
            values ($n, null, $h, current_timestamp)
            """,
            {"n": f"{_FAILED_PREFIX}{item.hour_ns}", "h": item.hour_ns},
        )


def _save_marks(tx: Transaction, marks: dict[str, Any]) -> None:
    for name, (ts, num) in marks.items():
        tx.execute(
            """
            insert or replace into mart_refresh_state (name, value_ts, value_int, updated_at)
            values ($n, $ts, $num, current_timestamp)
            """,
            {"n": name, "ts": ts, "num": num},
        )


def epoch_ns(ts: datetime) -> int:
    return round(ts.timestamp()) * 1_000_000_000


def _hours_of(h0_ns: int, h1_ns: int) -> list[datetime]:
    return [datetime.fromtimestamp(h // 1_000_000_000, UTC) for h in range(h0_ns, h1_ns, HOUR_NS)]


def efficiency_hook(max_gap_s: float) -> WindowHook:
    """Cache, KV and GPU marts (from scrapes) and latency marts (from mart_requests)."""

    def hook(tx: Transaction, h0_ns: int, h1_ns: int) -> None:
        hours = _hours_of(h0_ns, h1_ns)
        refresh_cache_hours(tx, hours, max_gap_s=max_gap_s)
        refresh_latency_hours(tx, hours)

    return hook


def _window_hooks(max_gap_s: float) -> list[WindowHook]:
    """The marts computed per window after the cost marts, in order."""
    return [efficiency_hook(max_gap_s), refresh_tasks_window]


class Refresher:
    """Runs refreshes one at a time (the scheduler's job and `inferledger refresh` share it)."""

    def __init__(
        self,
        storage: Storage,
        *,
        max_window_hours: int = 6,
        backfill_window_hours: int = 72,
        max_scrape_gap_ns: int = DEFAULT_MAX_SCRAPE_GAP_NS,
        hooks: Iterable[WindowHook] | None = None,
        metrics: ServiceMetrics | None = None,
        log_failures: bool = True,
    ) -> None:
        self.storage = storage
        self.metrics = metrics
        self.log_failures = log_failures  # False: the caller reports RefreshResult.failed
        self.max_window_hours = max_window_hours
        self.backfill_window_hours = max(backfill_window_hours, max_window_hours)
        self.max_scrape_gap_ns = max_scrape_gap_ns
        self.hooks = list(_window_hooks(max_scrape_gap_ns / 1e9) if hooks is None else hooks)
        self._lock = threading.Lock()
        self.last: RefreshResult | None = None

    def _new_scrapes_since(self) -> datetime | None:
        """The earliest scrape time among scrapes received since the last refresh: replicas are
        learned from those (history replays arrive with old timestamps); None learns from all."""
        row = self.storage.fetchall(
            """
            select min(s.ts), count(*) from scrapes as s
            where s.received_at > (
                select value_ts from mart_refresh_state where name = 'scrapes_received'
            )
            """
        )
        ts, count = row[0]
        if ts is None and not count:
            # no mark yet (learn from everything) or nothing new (a narrow, cheap window)
            has_mark = self.storage.scalar(
                "select count(*) from mart_refresh_state where name = 'scrapes_received'"
            )
            return datetime.now().astimezone() if has_mark else None
        return ts

    def refresh(self, *, full: bool = False, trigger: str = "scheduler") -> RefreshResult:
        """Bring the marts up to date; a failing hour is in ``RefreshResult.failed``. Raises
        RefreshError (one line) when planning or saving the run fails: nothing is saved then."""
        with self._lock:
            try:
                return self._refresh(full=full, trigger=trigger)
            except _WINDOW_ERRORS as exc:
                raise RefreshError(
                    f"ledger refresh failed: {one_line(exc)}; no watermark moved, the next run "
                    "retries"
                ) from exc

    def _refresh(self, *, full: bool, trigger: str) -> RefreshResult:
        started = time.perf_counter()
        started_at = datetime.now().astimezone()
        learn_replicas(self.storage, since=None if full else self._new_scrapes_since())
        plan = self.storage.write(
            lambda tx: _plan(tx, full=full, max_scrape_gap_ns=self.max_scrape_gap_ns)
        )
        total_requests = 0
        failed = [FailedHour(h, _BEYOND_INT64) for h in plan.hours if h > _LAST_HOUR_NS]
        hours = [h for h in plan.hours if h <= _LAST_HOUR_NS]
        long_run = len(hours) > self.backfill_window_hours
        runs = windows(hours, self.backfill_window_hours if long_run else self.max_window_hours)
        for h0, h1 in runs:
            try:
                total_requests += self._refresh_window(h0, h1)
                continue
            except _WINDOW_ERRORS as exc:
                if h1 - h0 == HOUR_NS:
                    failed.append(FailedHour(h0, one_line(exc)))
                    continue
            # Hour by hour, so that one bad hour does not hold back its neighbours.
            for h in range(h0, h1, HOUR_NS):
                try:
                    total_requests += self._refresh_window(h, h + HOUR_NS)
                except _WINDOW_ERRORS as exc:
                    failed.append(FailedHour(h, one_line(exc)))
        for item in failed if self.log_failures else ():
            log.error(
                "ledger refresh: hour %s failed%s: %s",
                item.when,
                " and is retried on the next run" if item.retried else "",
                item.error,
            )
        if plan.cache_hours:
            cache_hours = [
                datetime.fromtimestamp(h // 1_000_000_000, UTC) for h in plan.cache_hours
            ]
            gap_s = self.max_scrape_gap_ns / 1e9
            self.storage.write(lambda tx: refresh_cache_hours(tx, cache_hours, max_gap_s=gap_s))

        def finish(tx: Transaction) -> None:
            if plan.marks.get("outcomes_received") is not None:
                refresh_tasks_for_outcomes(tx, plan.outcomes_since)
            _save_marks(tx, plan.marks)
            _save_failed(tx, [item for item in failed if item.retried])
            tx.execute(
                "insert into mart_refresh_log values ($s, $sec, $h, $r, $t)",
                {
                    "s": started_at,
                    "sec": time.perf_counter() - started,
                    "h": len(plan.hours),
                    "r": total_requests,
                    "t": trigger,
                },
            )

        self.storage.write(finish)
        result = RefreshResult(
            hours=len(plan.hours),
            windows=len(runs),
            requests=total_requests,
            seconds=time.perf_counter() - started,
            reasons=plan.reasons,
            failed=tuple(failed),
        )
        if self.metrics is not None:
            self.metrics.ledger_failed_hours.set(len(failed))
        self.last = result
        if plan.hours:
            log.info(
                "ledger refreshed %d h in %d windows (%d requests) in %.2f s: %s%s",
                result.hours,
                result.windows,
                result.requests,
                result.seconds,
                ", ".join(result.reasons),
                f"; {len(failed)} h failed" if failed else "",
            )
        return result

    def _refresh_window(self, h0: int, h1: int) -> int:
        """Recompute the marts of hours [h0, h1) in one transaction; the requests allocated."""

        def op(tx: Transaction) -> int:
            result = allocate_window(tx, h0, h1, max_scrape_gap_ns=self.max_scrape_gap_ns)
            for hook in self.hooks:
                hook(tx, h0, h1)
            return result.requests

        return self.storage.write(op)


def refresh(storage: Storage, *, full: bool = False) -> RefreshResult:
    """One refresh with a fresh Refresher (tests, benchmarks, the CLI)."""
    return Refresher(storage).refresh(full=full, trigger="manual")
