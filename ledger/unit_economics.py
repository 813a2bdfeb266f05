"""Unit economics: business tasks, their outcomes, and what each accepted outcome cost.

A task (``inferledger.task.id``, else a trace of its own) may span several traces — retries,
fallbacks, the steps of a workflow. ``mart_tasks`` holds one row per task with everything it
cost (every LLM call, failed ones, retries and fallbacks included, retrieval, tools and human
review) and its outcome. The views read it: ``task_outcomes`` (one row per task),
``outcome_economics`` (day x workflow x app x route) and ``false_economy_findings``.
Definitions: docs/cost-model.md ("Tasks and outcomes"); details: docs/unit-economics.md.

Two refreshes, both run inside the caller's write transaction (a storage Transaction):

- :func:`refresh_tasks_window` — after ``allocate_window`` for the same window: every task with
  a call or review in the window, recomputed whole from the cost marts;
- :func:`refresh_tasks_for_outcomes` — the known tasks named by outcomes posted since a time.

The SQL lives in sql/marts/tasks.sql, one statement per ``-- step:`` (run by
ledger/sql_steps.py). The Unit economics page reads the views through its named queries
(sql/queries/economics_*.sql).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ledger.allocation import HOUR_NS, LOOKBACK_NS
from ledger.sql_steps import run_step, steps_by_name

if TYPE_CHECKING:
    from inferledger.core.storage import Transaction


_FILE = "tasks.sql"
#: Task (or trace) ranges closer than this are read from the marts (or spans) in one scan: a
#: statement per island costs more than skipping a short gap.
MERGE_GAP_NS = HOUR_NS
_TEMP_TABLES = (
    "t_hours",
    "t_keys",
    "t_reach",
    "t_islands",
    "t_req",
    "t_svc",
    "t_trace_reach",
    "t_spans",
    "t_tasks",
)


# ---------------------------------------------------------------------------- refreshes
def _run(tx: Transaction, name: str, params: Mapping[str, Any]) -> None:
    run_step(tx, steps_by_name(_FILE)[name], params)


def _islands(tx: Transaction, step: str) -> list[tuple[int, int]]:
    _run(tx, step, {"gap_ns": MERGE_GAP_NS})
    return [(int(a), int(b)) for a, b in tx.execute("select a, b from t_islands").fetchall()]


def _recompute(
    tx: Transaction,
    keys_step: str,
    params: dict[str, Any],
    reach: tuple[int | None, int | None],
) -> int:
    """Recompute the tasks the keys step picks; returns the mart_tasks rows written."""
    base = {"lookback_ns": LOOKBACK_NS, **params}
    _run(tx, keys_step, base)
    _run(tx, "t_reach", {"r0_ns": reach[0], "r1_ns": reach[1]})
    _run(tx, "t_req_init", {})
    _run(tx, "t_svc_init", {})
    for a, b in _islands(tx, "t_task_islands"):
        _run(tx, "t_req_fill", {"a_ns": a, "b_ns": b})
        _run(tx, "t_svc_fill", {"a_ns": a, "b_ns": b})
    _run(tx, "t_trace_reach", base)
    _run(tx, "t_spans_init", {})
    for a, b in _islands(tx, "t_span_islands"):
        _run(tx, "t_spans_fill", {"a_ns": a, "b_ns": b})
    _run(tx, "t_tasks", {})
    _run(tx, "t_hours_before", {})
    _run(tx, "store_tasks", {})
    _run(tx, "insert_tasks", {})
    _run(tx, "t_hours_after", {})
    _run(tx, "store_outcomes_hourly", {})
    _run(tx, "insert_outcomes_hourly", {})
    (written,) = tx.execute("select count(*) from t_tasks").fetchone() or (0,)
    # Temp tables live as long as the writer's connection: free them. (On an error the
    # transaction rolls back, and they with it.)
    for name in _TEMP_TABLES:
        tx.execute(f"drop table if exists temp.{name}")
    return int(written)


def refresh_tasks_window(tx: Transaction, h0_ns: int, h1_ns: int) -> int:
    """Recompute mart_tasks for every task with a request overlapping the whole hours
    [h0_ns, h1_ns), a retrieval or tool call or a review in them, or a known range overlapping
    them; each such task whole, from all its rows in the marts. Returns the rows written.

    Run it right after ``allocate_window`` for the same window, in the same transaction: a
    task's rows outside the window are found through its mart_tasks range, which stays right
    only if every allocated window is followed by this refresh.
    """
    if h0_ns % HOUR_NS or h1_ns % HOUR_NS or h1_ns <= h0_ns:
        raise ValueError(f"window must be whole hours, got [{h0_ns}, {h1_ns})")
    return _recompute(
        tx,
        "t_keys_window",
        {"h0_ns": h0_ns, "h1_ns": h1_ns},
        (h0_ns - LOOKBACK_NS, h1_ns),
    )


def refresh_tasks_for_outcomes(tx: Transaction, since_received_at: datetime | None) -> int:
    """Recompute the known tasks (rows of mart_tasks) named by outcomes received at or after
    ``since_received_at`` (None: every outcome); an outcome naming only a trace resolves to that
    trace's task. Returns the rows written.

    The outcome and economics follow at once; a changed review time reaches review_cost once
    the ledger has recomputed mart_reviews for the task's hour (the refresher re-allocates the
    hours of tasks with new outcomes, then calls this).
    """
    return _recompute(tx, "t_keys_outcomes", {"since": since_received_at}, (None, None))
