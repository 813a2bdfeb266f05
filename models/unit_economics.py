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

The SQL lives in sql/marts/tasks.sql, one statement per ``-- step:``. The query helpers at the
end are what the UI calls: grouping columns come from an allowlist, values are bound.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import date, datetime
from enum import StrEnum
from functools import cache
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from inferledger.errors import BadInputError
from inferledger.storage import quote_ident
from models.allocation import HOUR_NS, LOOKBACK_NS, Step, load_steps

if TYPE_CHECKING:
    import duckdb

    from inferledger.storage import Storage

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

#: Columns of task_outcomes a helper may group or filter by.
TASK_DIMENSIONS = (
    "day",
    "week",
    "environment",
    "app",
    "team",
    "route",
    "workflow",
    "first_model",
    "final_model",
    "outcome",
)


class CostPolicy(StrEnum):
    """Which idle cost a task carries (docs/cost-model.md, "Idle policy")."""

    SEPARATE = "separate"
    USAGE = "usage"
    EVEN = "even"
    CONFIGURED = "configured"


class UnitEconomicsQueryError(BadInputError):
    """A helper was asked for a column or policy it does not know; nothing was read."""


# ---------------------------------------------------------------------------- refreshes
def _run(cur: duckdb.DuckDBPyConnection, name: str, params: Mapping[str, Any]) -> None:
    step = _steps()[name]
    cur.execute(step.sql, {p: params[p] for p in step.params})


@cache
def _steps() -> dict[str, Step]:
    return {step.name: step for step in load_steps(_FILE)}


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


# ---------------------------------------------------------------------------- queries
def _dimensions(by: Sequence[str], what: str) -> list[str]:
    if isinstance(by, str):
        by = (by,)
    unknown = [name for name in by if name not in TASK_DIMENSIONS]
    if unknown:
        raise UnitEconomicsQueryError(
            f"{what}: unknown column {unknown[0]!r} (known: {', '.join(TASK_DIMENSIONS)})"
        )
    return list(dict.fromkeys(by))


def _policy(idle_policy: CostPolicy | str) -> CostPolicy:
    try:
        return CostPolicy(str(idle_policy).lower())
    except ValueError:
        raise UnitEconomicsQueryError(
            f"idle_policy must be one of {', '.join(p.value for p in CostPolicy)}, "
            f"got {idle_policy!r}"
        ) from None


def _where(
    start: date | None,
    end: date | None,
    filters: Mapping[str, str | Sequence[str] | None] | None,
) -> tuple[str, list[Any]]:
    """A WHERE clause over task_outcomes: start <= day < end, and each filter column equal to
    its value (or one of its values; None matches NULL)."""
    clauses: list[str] = []
    params: list[Any] = []
    if start is not None:
        clauses.append("day >= ?")
        params.append(_as_date(start, "start"))
    if end is not None:
        clauses.append("day < ?")
        params.append(_as_date(end, "end"))
    for name, value in (filters or {}).items():
        (column,) = _dimensions((name,), "filters")
        ident = quote_ident(column)
        values = [value] if value is None or isinstance(value, str | date) else list(value)
        given = [v for v in values if v is not None]
        parts = []
        if given:
            parts.append(f"{ident} in ({', '.join('?' for _ in given)})")
            params.extend(given)
        if len(given) < len(values):
            parts.append(f"{ident} is null")
        clauses.append("(" + (" or ".join(parts) or "false") + ")")
    return (" where " + " and ".join(clauses)) if clauses else "", params


def _as_date(value: date, what: str) -> date:
    if isinstance(value, datetime):
        return value.date()
    if isinstance(value, date):
        return value
    raise UnitEconomicsQueryError(f"{what} must be a date, got {value!r}")


# The same measures as sql/views/outcome_economics.sql, over any grouping (a test checks that
# grouping by the view's grain gives the view's numbers).
_MEASURES = """
    count(*) as tasks,
    count(*) filter (where outcome = 'accepted') as accepted,
    count(*) filter (where outcome = 'corrected') as corrected,
    count(*) filter (where outcome = 'rejected') as rejected,
    count(*) filter (where outcome = 'failed') as failed,
    count(*) filter (where outcome = 'pending') as pending,
    count(*) filter (where is_accepted) as accepted_outcomes,
    cast(sum(llm_calls) as bigint) as llm_calls,
    cast(sum(tokens) as bigint) as tokens,
    sum({total}) as total_cost,
    sum({total}) / nullif(count(*) filter (where is_accepted), 0) as cost_per_accepted,
    sum({total}) / nullif(count(*) filter (where outcome = 'accepted'), 0)
        as cost_per_accepted_strict,
    count(*) filter (where is_accepted) / nullif(count(*) filter (where decided), 0)
        as acceptance_rate,
    sum(waste_cost) as waste_cost,
    sum(waste_cost) / nullif(sum(total_cost), 0) as waste_share,
    sum(retry_cost) / nullif(sum(total_cost), 0) as retry_share,
    sum(fallback_cost) / nullif(sum(total_cost), 0) as fallback_share,
    sum(review_cost) / nullif(sum(total_cost), 0) as review_share,
    sum(llm_cost) / nullif(sum(llm_calls), 0) as cost_per_request,
    sum(llm_cost) * 1e6 / nullif(sum(tokens), 0) as cost_per_1m_tokens
"""
_POLICY_TOTAL = {
    CostPolicy.SEPARATE: "total_cost",
    CostPolicy.USAGE: "total_cost_usage",
    CostPolicy.EVEN: "total_cost_even",
    CostPolicy.CONFIGURED: "total_cost_configured",
}


def cost_per_accepted(
    storage: Storage,
    start: date | None = None,
    end: date | None = None,
    by: Sequence[str] = ("workflow",),
    filters: Mapping[str, str | Sequence[str] | None] | None = None,
    idle_policy: CostPolicy | str = CostPolicy.SEPARATE,
) -> pa.Table:
    """Cost per accepted outcome of the tasks that started on days [start, end), grouped by
    ``by`` (columns of TASK_DIMENSIONS), one row per group, sorted by it.

    Columns: the ``by`` columns; tasks, accepted, corrected, rejected, failed, pending,
    accepted_outcomes (accepted + corrected), llm_calls, tokens, total_cost (under
    ``idle_policy``), cost_per_accepted (÷ accepted_outcomes), cost_per_accepted_strict
    (÷ accepted only), acceptance_rate (of decided tasks), waste_cost, waste_share,
    retry_share, fallback_share, review_share (of the `separate` total), cost_per_request and
    cost_per_1m_tokens (LLM cost only). Ratios are NULL where their denominator is 0.
    """
    groups = _dimensions(by, "by")
    total = _POLICY_TOTAL[_policy(idle_policy)]
    where, params = _where(start, end, filters)
    cols = ", ".join(quote_ident(c) for c in groups)
    select = (cols + ", ") if groups else ""
    tail = f" group by {cols} order by {cols}" if groups else ""
    sql = f"select {select}{_MEASURES.format(total=total)} from task_outcomes{where}{tail}"
    return storage.query_arrow(sql, params)


#: Orderings list_tasks accepts (each descending, then by task_key).
TASK_ORDERS = ("total_cost", "waste_cost", "retry_cost", "review_cost", "first_start")


def list_tasks(
    storage: Storage,
    start: date | None = None,
    end: date | None = None,
    filters: Mapping[str, str | Sequence[str] | None] | None = None,
    order_by: str = "total_cost",
    limit: int = 100,
) -> pa.Table:
    """The tasks that started on days [start, end) matching ``filters`` (task_outcomes rows),
    the ``limit`` first by ``order_by`` (one of TASK_ORDERS, descending)."""
    if order_by not in TASK_ORDERS:
        raise UnitEconomicsQueryError(
            f"order_by: unknown column {order_by!r} (known: {', '.join(TASK_ORDERS)})"
        )
    if not isinstance(limit, int) or limit < 1:
        raise UnitEconomicsQueryError(f"limit must be a positive integer, got {limit!r}")
    where, params = _where(start, end, filters)
    sql = (
        f"select * from task_outcomes{where} "
        f"order by {quote_ident(order_by)} desc, task_key limit {limit}"
    )
    return storage.query_arrow(sql, params)


def false_economy(storage: Storage, start: date | None = None, end: date | None = None) -> pa.Table:
    """The false_economy_findings rows whose week (the week after the change) starts on a day
    in [start, end), newest first."""
    clauses, params = [], []
    if start is not None:
        clauses.append("week >= ?")
        params.append(_as_date(start, "start"))
    if end is not None:
        clauses.append("week < ?")
        params.append(_as_date(end, "end"))
    where = (" where " + " and ".join(clauses)) if clauses else ""
    sql = (
        f"select * from false_economy_findings{where} "
        "order by week desc, scope, workflow nulls last, app nulls last, route nulls last"
    )
    return storage.query_arrow(sql, params)
