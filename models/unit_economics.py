"""Unit economics: business tasks, their outcomes, and what each accepted outcome cost.

A task (``inferledger.task.id``, else a trace of its own) may span several traces — retries,
fallbacks, the steps of a workflow. ``mart_tasks`` holds one row per task with everything it
cost (every LLM call, failed ones, retries and fallbacks included, retrieval, tools and human
review) and its outcome. The views read it: ``task_outcomes`` (one row per task),
``outcome_economics`` (day x workflow x app x route) and ``false_economy_findings``.
Definitions: docs/cost-model.md ("Tasks and outcomes"); details: docs/unit-economics.md.

Two refreshes, both run on the writer's cursor inside the caller's transaction:

- :func:`refresh_tasks_window` — after ``allocate_window`` for the same window: every task with
  a call or review in the window, recomputed whole from the cost marts;
- :func:`refresh_tasks_for_outcomes` — the known tasks named by outcomes posted since a time.

The SQL lives in sql/marts/tasks.sql, one statement per ``-- step:`` (run by
models/sql_steps.py). The Unit economics page reads the views through its named queries
(sql/queries/economics_*.sql).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from models.allocation import HOUR_NS, LOOKBACK_NS
from models.sql_steps import run_step, steps_by_name

if TYPE_CHECKING:
    import duckdb


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
def _run(cur: duckdb.DuckDBPyConnection, name: str, params: Mapping[str, Any]) -> None:
    run_step(cur, steps_by_name(_FILE)[name], params)


def _islands(cur: duckdb.DuckDBPyConnection, step: str) -> list[tuple[int, int]]:
    _run(cur, step, {"gap_ns": MERGE_GAP_NS})
    return [(int(a), int(b)) for a, b in cur.execute("select a, b from t_islands").fetchall()]


def _recompute(
    cur: duckdb.DuckDBPyConnection,
    keys_step: str,
    params: dict[str, Any],
    reach: tuple[int | None, int | None],
) -> int:
    """Recompute the tasks the keys step picks; returns the mart_tasks rows written."""
    base = {"lookback_ns": LOOKBACK_NS, **params}
    _run(cur, keys_step, base)
    _run(cur, "t_reach", {"r0_ns": reach[0], "r1_ns": reach[1]})
    _run(cur, "t_req_init", {})
    _run(cur, "t_svc_init", {})
    for a, b in _islands(cur, "t_task_islands"):
        _run(cur, "t_req_fill", {"a_ns": a, "b_ns": b})
        _run(cur, "t_svc_fill", {"a_ns": a, "b_ns": b})
    _run(cur, "t_trace_reach", base)
    _run(cur, "t_spans_init", {})
    for a, b in _islands(cur, "t_span_islands"):
        _run(cur, "t_spans_fill", {"a_ns": a, "b_ns": b})
    _run(cur, "t_tasks", {})
    _run(cur, "t_hours_before", {})
    _run(cur, "store_tasks", {})
    _run(cur, "insert_tasks", {})
    _run(cur, "t_hours_after", {})
    _run(cur, "store_outcomes_hourly", {})
    _run(cur, "insert_outcomes_hourly", {})
    (written,) = cur.execute("select count(*) from t_tasks").fetchone() or (0,)
    # Temp tables live as long as the writer's connection: free them. (On an error the
    # transaction rolls back, and they with it.)
    for name in _TEMP_TABLES:
        cur.execute(f"drop table if exists temp.{name}")
    return int(written)


def refresh_tasks_window(cur: duckdb.DuckDBPyConnection, h0_ns: int, h1_ns: int) -> int:
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
        cur,
        "t_keys_window",
        {"h0_ns": h0_ns, "h1_ns": h1_ns},
        (h0_ns - LOOKBACK_NS, h1_ns),
    )


def refresh_tasks_for_outcomes(
    cur: duckdb.DuckDBPyConnection, since_received_at: datetime | None
) -> int:
    """Recompute the known tasks (rows of mart_tasks) named by outcomes received at or after
    ``since_received_at`` (None: every outcome); an outcome naming only a trace resolves to that
    trace's task. Returns the rows written.

    The outcome and economics follow at once; a changed review time reaches review_cost once
    the ledger has recomputed mart_reviews for the task's hour (the refresher re-allocates the
    hours of tasks with new outcomes, then calls this).
    """
    return _recompute(cur, "t_keys_outcomes", {"since": since_received_at}, (None, None))
