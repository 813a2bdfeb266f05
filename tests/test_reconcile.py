"""Figures that agree one click apart (issue #10, §3): the request explorer's summary states the
Spend page's total for the same filters; failures count at the levels users mean (calls,
attempts, tasks) and the Overview, the explorer's "Failed only" and the trace page's task card
agree on what failed; Unit economics says how its tasks' total differs from Spend's.

Failures on a small ledger built here through the real ingest path and the real refreshes
(exact counts); reconciliation on the real demo ledger."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from app.components import money
from inferledger.core.storage import Storage
from inferledger.fixtures import BASE_NS
from inferledger.ledger_fixtures import SpanSet
from ledger.allocation import HOUR_NS, allocate_window
from ledger.queries import Filters, run
from ledger.unit_economics import refresh_tasks_window
from tests.conftest import hours_up_to, whole_days

H0 = BASE_NS // HOUR_NS * HOUR_NS
START = datetime.fromtimestamp(H0 / 1e9, UTC)
RANGE = Filters(START, START + timedelta(hours=2))
EXPLORER = {"hosting": None, "model_like": None, "min_cost": None, "sort": "start"}


def _task(
    spans: SpanSet,
    at: float,
    task: str,
    attempts: list[tuple[bool, list[bool]]],
    outcome: str | None = None,
) -> list[str]:
    """A task with its attempts, each (root span failed, [LLM call failed, ...]); returns the
    traces' ids (hex) in attempt order."""
    ids = []
    for n, (root_failed, calls) in enumerate(attempts, start=1):
        trace = spans.new_trace()
        t0 = at + 20 * (n - 1)
        last = n == len(attempts)
        root = spans.root(
            trace, t0, t0 + 10, app="support", route="/answer", workflow="answer-ticket",
            task_id=task, attempt=n, outcome=outcome if last else None, error=root_failed,
        )  # fmt: skip
        for i, failed in enumerate(calls):
            spans.llm_call(
                trace, root, t0 + 1 + 2 * i, t0 + 2 + 2 * i, model="gpt-test", provider="openai",
                input_tokens=100, output_tokens=10, task_id=task, attempt=n, error=failed,
            )  # fmt: skip
        ids.append(trace.hex())
    return ids


@pytest.fixture
def failures(storage: Storage) -> dict[str, list[str]]:
    """Five tasks (times in seconds after H0):
    A: attempt 1 blocked by a guardrail (root span error, its LLM call fine), attempt 2 fine;
    B: one attempt, blocked (root error, call fine): no successful final attempt;
    C: one attempt whose only LLM call failed (root fine): the attempt failed;
    D: one attempt, two calls: the first failed, the fallback worked;
    E: one attempt, fine.
    Calls 7 (2 failed); attempts 6 (A1, B, C failed); tasks 5 (B, C failed)."""
    spans = SpanSet(H0)
    traces = {
        "A": _task(spans, 60, "task-a", [(True, [False]), (False, [False])], "accepted"),
        "B": _task(spans, 120, "task-b", [(True, [False])]),
        "C": _task(spans, 180, "task-c", [(False, [True])]),
        "D": _task(spans, 240, "task-d", [(False, [True, False])], "accepted"),
        "E": _task(spans, 300, "task-e", [(False, [False])], "accepted"),
    }
    spans.store(storage)

    def op(tx) -> None:
        allocate_window(tx, H0, H0 + HOUR_NS)
        refresh_tasks_window(tx, H0, H0 + HOUR_NS)

    storage.write(op)
    return traces


def test_failures_count_calls_attempts_and_tasks(storage: Storage, failures) -> None:
    f = run(storage, "overview_failures", RANGE).to_pylist()[0]
    assert (f["requests"], f["failed"]) == (7, 2)
    assert (f["attempts"], f["failed_attempts"]) == (6, 3)
    assert (f["tasks"], f["failed_tasks"]) == (5, 2)
    assert f["attempt_failure_rate"] == pytest.approx(3 / 6)
    assert f["task_failure_rate"] == pytest.approx(2 / 5)
    # the filters narrow every level alike
    none = run(storage, "overview_failures", RANGE.with_(route="/other")).to_pylist()[0]
    assert (none["requests"], none["attempts"], none["tasks"]) == (0, 0, 0)
    assert none["attempt_failure_rate"] is None


def test_failed_only_and_the_task_card_agree_with_the_overview(storage: Storage, failures):
    """ "Failed only" lists the failed calls and every call of a failed attempt; the summary's
    failed attempts are the Overview's; each task's traces say which attempt failed."""
    rows = run(
        storage, "requests_explorer", RANGE, failed_only=True, descending=False, limit=50,
        **EXPLORER,
    ).to_pylist()  # fmt: skip
    failed_traces = {failures["A"][0], failures["B"][0], failures["C"][0]}
    assert {r["trace_id"] for r in rows} == failed_traces | {failures["D"][0]}
    assert len(rows) == 4  # A1's, B's and C's calls, and D's failed call (its fallback worked)
    d = [r for r in rows if r["trace_id"] == failures["D"][0]]
    assert [(r["failed"], r["root_failed"]) for r in d] == [(True, False)]
    summary = run(
        storage, "requests_explorer_summary", RANGE, failed_only=False, descending=True,
        page_size=25, **EXPLORER,
    ).to_pylist()[0]  # fmt: skip
    assert (summary["requests"], summary["failed"], summary["failed_attempts"]) == (7, 2, 3)

    attempts = {}
    for name, task in (("A", "task-a"), ("B", "task-b"), ("C", "task-c"), ("D", "task-d")):
        t = run(storage, "trace_task", RANGE, task_key=task).to_pylist()[0]
        traces = run(
            storage, "trace_task_traces", RANGE, task_key=task, from_ns=t["first_start_ns"],
            to_ns=t["last_end_ns"], limit=50,
        ).to_pylist()  # fmt: skip
        assert [tr["trace_id"] for tr in traces] == failures[name]
        attempts[name] = [tr["attempt_failed"] for tr in traces]
    assert attempts == {"A": [True, False], "B": [True], "C": [True], "D": [False]}
    card_failed = {
        tid
        for name, flags in attempts.items()
        for tid, f in zip(failures[name], flags, strict=True)
        if f
    }
    assert card_failed == failed_traces


# ------------------------------------------------------------------- demo ledger: money
def _spend(storage: Storage, filters: Filters) -> float:
    return run(storage, "spend_kpis", filters).to_pylist()[0]["cost"]


@pytest.fixture(scope="module")
def demo(demo_ledger, tmp_path_factory):
    """The demo ledger, on a private copy (opening a database recreates its views)."""
    import shutil

    copy = tmp_path_factory.mktemp("reconcile") / "demo.duckdb"
    shutil.copy(demo_ledger, copy)
    with Storage(copy) as storage:
        yield storage


FILTER_SETS = [
    {},
    {"route": "/answer"},
    {"team": "platform"},
    {"policy": "usage"},
    {"policy": "separate", "app": "internal-chat"},
]


@pytest.mark.parametrize("extra", FILTER_SETS)
def test_the_explorers_spend_parts_add_up_to_spend(demo, ledger_end, extra) -> None:
    start, end, _query = whole_days(ledger_end)
    filters = Filters(start, end, **extra)
    parts = {
        r["part"]: r["cost"] for r in run(demo, "requests_explorer_spend", filters).to_pylist()
    }
    assert sum(parts.values()) == pytest.approx(_spend(demo, filters), abs=0.005)
    assert "other" not in parts
    # the rows' sum is the LLM calls and their idle share: with the whole ledger in range,
    # exactly the spend's LLM and shared idle parts
    rows = run(
        demo, "requests_explorer_summary", filters, failed_only=False, descending=True,
        page_size=25, **EXPLORER,
    ).to_pylist()[0]  # fmt: skip
    llm = parts.get("llm", 0.0) + parts.get("idle_shared", 0.0)
    assert rows["cost"] == pytest.approx(llm, abs=0.005)


@pytest.mark.parametrize("hours", [None, 1, 2])
@pytest.mark.parametrize("extra", FILTER_SETS[:3])
def test_unit_economics_reconciles_with_spend(demo, ledger_end, hours, extra) -> None:
    if hours is None:
        start, end, _query = whole_days(ledger_end)
    else:
        start, end, _query = hours_up_to(ledger_end - timedelta(hours=1), hours)
    filters = Filters(start, end, **extra)
    r = run(demo, "economics_reconcile", filters).to_pylist()[0]
    totals = run(demo, "economics_totals", filters).to_pylist()[0]
    assert r["spend"] == pytest.approx(_spend(demo, filters), abs=1e-9)
    assert r["tasks_cost"] == pytest.approx(totals["total_cost"], abs=1e-9)
    assert r["spend"] == pytest.approx(
        r["tasks_cost"] + r["unattached"] + r["before"] - r["after"] + r["other"], abs=1e-9
    )
    assert r["before"] >= 0 and r["after"] >= 0 and r["unattached"] >= 0
    if hours is None:  # the whole ledger: no task starts before it or runs past it
        assert (r["before"], r["after"]) == (0, 0)
        assert abs(r["other"]) < 0.005
    else:  # the named parts explain all but a small rest (calls straddling an hour edge)
        assert abs(r["other"]) <= 0.05 * max(r["spend"], 0.01)


# ------------------------------------------------------------------- in the browser
def settled(page) -> None:
    """Until every callback has answered (the URL's filters reach the page in a second round)."""
    page.wait_for_load_state("networkidle")
    page.wait_for_function(
        "() => !document.querySelector('[data-dash-is-loading=\"true\"]')", timeout=15_000
    )


@pytest.mark.browser
@pytest.mark.parametrize("extra", ["", "&route=/answer", "&team=platform&idle=usage"])
def test_the_explorer_states_spends_total(ledger_server, page, ledger_end, extra) -> None:
    """ "See these requests →" from Spend: the explorer's Spend total is the Spend page's, for
    the same filters, within half a cent."""
    start, end, query = whole_days(ledger_end)
    query += extra
    page.goto(ledger_server.url + "/spend" + query)
    spend_text = page.locator("#spend-kpi-spend")
    spend_text.wait_for(timeout=15_000)
    settled(page)
    shown_on_spend = spend_text.inner_text()
    page.goto(ledger_server.url + "/requests" + query)
    total = page.locator("#requests-spend-total")
    total.wait_for(timeout=15_000)
    settled(page)
    assert total.inner_text() == shown_on_spend
    params = dict(p.split("=", 1) for p in extra.strip("&").split("&") if p)
    policy = params.pop("idle", None)
    filters = Filters(start, end, **params, **({"policy": policy} if policy else {}))
    expected = _spend(ledger_server.storage, filters)
    assert float(total.inner_text().strip("$").replace(",", "")) == pytest.approx(
        expected, abs=0.005
    )
    assert money(expected) == shown_on_spend
    breakdown = page.locator("#requests-breakdown").inner_text()
    assert "LLM calls" in breakdown and "rows sum" in page.locator("#requests-total").inner_text()
