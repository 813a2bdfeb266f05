"""Cost allocation: replica cost per hour split into each request's prefill and decode usage and
idle, hosted calls priced by tokens, services and review priced, rolled up into hourly spend.

The SQL lives in sql/marts/allocation.sql and sql/marts/spend.sql, one statement per
``-- step:`` marker; this module runs the steps for a window of whole hours inside one write
transaction (the caller's storage Transaction). Definitions: docs/cost-model.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa

from ledger.sql_steps import load_steps, run_step, run_steps

if TYPE_CHECKING:
    from inferledger.core.storage import Storage, Transaction

HOUR_NS = 3_600_000_000_000
#: How far before a window the refresher looks for requests and tasks that began earlier and
#: still overlap it. A request or task longer than this is cut at the window's start.
LOOKBACK_NS = 6 * HOUR_NS
#: A successful scrape counts as up time until the next scrape, at most this long after it
#: (Prometheus's staleness period).
DEFAULT_MAX_SCRAPE_GAP_NS = 300 * 1_000_000_000


def hour_floor_ns(ns: int) -> int:
    return ns // HOUR_NS * HOUR_NS


@dataclass(frozen=True, slots=True)
class WindowResult:
    hours: int
    requests: int


def drop_window_tables(tx: Transaction) -> None:
    """Free the window's temp tables (they live as long as the writer's connection)."""
    names = [
        step.name
        for file in ("allocation.sql", "spend.sql")
        for step in load_steps(file)
        if step.name.startswith("w_")
    ]
    for name in names:
        tx.execute(f"drop table if exists temp.{name}")


def allocate_window(
    tx: Transaction,
    h0_ns: int,
    h1_ns: int,
    *,
    max_scrape_gap_ns: int = DEFAULT_MAX_SCRAPE_GAP_NS,
) -> WindowResult:
    """Recompute every cost mart for the whole hours [h0_ns, h1_ns) (Unix ns, hour-aligned).

    Run inside a write transaction: it replaces the window's rows of mart_request_pieces,
    mart_replica_hours, mart_coverage_hourly, mart_service_calls, mart_service_hours,
    mart_reviews and mart_spend_hourly, and the mart_requests rows of every request
    overlapping the window.
    """
    if h0_ns % HOUR_NS or h1_ns % HOUR_NS or h1_ns <= h0_ns:
        raise ValueError(f"window must be whole hours, got [{h0_ns}, {h1_ns})")
    params = {
        "h0_ns": h0_ns,
        "h1_ns": h1_ns,
        "lookback_ns": LOOKBACK_NS,
        "gap_ns": max_scrape_gap_ns,
    }
    run_steps(tx, "allocation.sql", params)
    run_steps(tx, "spend.sql", params)
    (requests,) = tx.execute("select count(*) from w_req").fetchone() or (0,)
    drop_window_tables(tx)
    return WindowResult(hours=(h1_ns - h0_ns) // HOUR_NS, requests=int(requests))


def estimate_gpu_seconds(storage: Storage, from_ns: int, to_ns: int) -> pa.Table:
    """The GPU-share estimator alone, for checking it against ground truth: per engine request
    overlapping [from_ns, to_ns), its estimated prefill and decode GPU-seconds.

    Columns: trace_id, span_id (the engine span), replica, prefill_gpu_s, decode_gpu_s. Runs the
    allocation steps up to the pieces in a transaction that is rolled back: nothing is stored.
    """
    h0 = hour_floor_ns(from_ns)
    h1 = hour_floor_ns(to_ns - 1) + HOUR_NS
    params = {
        "h0_ns": h0,
        "h1_ns": h1,
        "lookback_ns": LOOKBACK_NS,
        "gap_ns": DEFAULT_MAX_SCRAPE_GAP_NS,
    }
    wanted = (
        "w_hours", "w_spans", "w_req", "w_intervals", "w_gpu_price", "w_scrape_cover", "w_rate",
        "w_est", "w_sweep",
    )  # fmt: skip

    def op(tx: Transaction) -> pa.Table:
        for step in load_steps("allocation.sql"):
            if step.name in wanted or step.name == "w_pieces":
                run_step(tx, step, params)
        table = tx.arrow(
            """
            select r.trace_id, r.engine_span_id as span_id, r.replica,
                coalesce(sum(p.gpu_s) filter (where p.stage = 'prefill'), 0) as prefill_gpu_s,
                coalesce(sum(p.gpu_s) filter (where p.stage = 'decode'), 0) as decode_gpu_s
            from w_req as r
            inner join w_pieces as p on p.trace_id = r.trace_id and p.span_id = r.span_id
            where r.engine_span_id is not null
            group by r.trace_id, r.engine_span_id, r.replica
            order by r.trace_id, r.engine_span_id
            """
        )
        drop_window_tables(tx)
        return table

    return storage.write(op)
