"""The dashboard queries (sql/queries, ledger/queries.py): they run on the marts, agree
with each other and with the views, and refuse bad parameters with one clear line."""

from __future__ import annotations

import importlib.util
import re
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from inferledger.ledger_fixtures import S, worked_example
from ledger.allocation import HOUR_NS
from ledger.marts import refresh
from ledger.queries import Filters, QueryError, bind, query_names, run

ROOT = Path(__file__).resolve().parent.parent
HOUR0 = 494_444 * HOUR_NS
START = datetime.fromtimestamp(HOUR0 / S, UTC)


@pytest.fixture
def ledger(storage):
    worked_example(storage, HOUR0 + 100 * S)
    refresh(storage)
    return storage


def filters(**kw) -> Filters:
    return Filters(START - timedelta(days=1), START + timedelta(hours=2), **kw)


#: The request explorer's own filters, all off: the global filters alone.
NO_EXPLORER_FILTERS = {"hosting": None, "failed_only": False, "model_like": None, "min_cost": None}


def total(table, column="cost") -> float:
    return sum(v for v in table.column(column).to_pylist() if v is not None)


@pytest.mark.parametrize("policy", ["separate", "usage", "even", "configured"])
def test_every_view_of_spend_agrees(ledger, policy):
    f = filters(policy=policy)
    kpis = run(ledger, "spend_kpis", f).to_pylist()[0]
    assert kpis["cost"] == pytest.approx(0.1)  # the replica's 100 s at $3.60/h
    assert kpis["requests"] == 2 and kpis["input_tokens"] == 1100
    for dim in ("team", "app", "route", "model", "stage", "deployment"):
        over_time = run(ledger, "spend_over_time", f, dim=dim, bucket="hour")
        assert total(over_time) == pytest.approx(kpis["cost"]), dim
    assert total(run(ledger, "spend_hierarchy", f)) == pytest.approx(kpis["cost"])
    assert total(ledger.query_arrow("select total from spend_totals"), "total") == pytest.approx(
        0.1
    )


def test_idle_is_its_own_key_under_separate(ledger):
    rows = run(ledger, "spend_over_time", filters(policy="separate"), dim="app", bucket="day")
    by_key = dict(zip(rows.column("key").to_pylist(), rows.column("cost").to_pylist(), strict=True))
    assert by_key["(idle)"] == pytest.approx(0.07)
    assert set(by_key) == {"a1", "a2", "(idle)"}


def test_filters_narrow_the_numbers(ledger):
    only_a1 = run(ledger, "spend_kpis", filters(app="a1", policy="separate")).to_pylist()[0]
    assert only_a1["requests"] == 1
    assert only_a1["cost"] == pytest.approx(0.014510, abs=1e-6)
    page = run(ledger, "requests_explorer_newest", filters(app="a2"), **NO_EXPLORER_FILTERS)
    assert page.column("app").to_pylist() == ["a2"]
    nothing = run(ledger, "spend_kpis", filters(team="nobody")).to_pylist()[0]
    assert nothing["cost"] == 0 and nothing["requests"] == 0


def test_requests_page_is_newest_first_and_pages(ledger):
    def page(offset: int) -> list[dict]:
        return run(
            ledger,
            "requests_explorer_newest",
            filters(),
            limit=1,
            offset=offset,
            **NO_EXPLORER_FILTERS,
        ).to_pylist()

    first, second = page(0), page(1)
    assert [r["app"] for r in first + second] == ["a2", "a1"]


def test_top_movers_compare_with_the_period_before(ledger):
    f = Filters(START, START + timedelta(hours=1), policy="separate")
    movers = {
        r["key"]: r for r in run(ledger, "overview_movers", f, dim="app", limit=10).to_pylist()
    }
    assert movers["a1"]["cost_before"] == 0 and movers["a1"]["delta"] > 0


def _load_bench() -> Any:
    spec = importlib.util.spec_from_file_location("bench_marts", ROOT / "bench" / "bench_marts.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_marts"] = module  # dataclasses look their module up while being built
    spec.loader.exec_module(module)
    return module


def _quoted_query_names(folder: Path) -> set[str]:
    """Every query name quoted in the .py files under `folder` (a plain text search)."""
    known = set(query_names())
    text = "\n".join(p.read_text(encoding="utf-8") for p in folder.rglob("*.py"))
    return {name for name in re.findall(r"[\"']([a-z_0-9]+)[\"']", text) if name in known}


def test_the_benchmark_times_exactly_the_queries_the_pages_run():
    bench = _load_bench()
    timed = set(bench.page_query_names())
    # what app/ names, and what the models and ledger modules it calls for page data name
    in_pages = _quoted_query_names(ROOT / "app")
    in_models = _quoted_query_names(ROOT / "models") | _quoted_query_names(ROOT / "ledger")
    assert in_pages <= timed
    assert timed <= in_pages | in_models
    assert {"overview_movers", "requests_explorer_newest", "trace_span_detail"} <= timed
    # and no query file is left that no page runs
    assert timed == set(query_names())


def test_every_dashboard_query_runs(ledger):
    bench = _load_bench()
    queries = bench.dashboard_queries(ledger, filters())
    assert set(bench.page_query_names()) <= set(queries)
    for name, (sql, params) in queries.items():
        ledger.query_arrow(sql, params)  # binds and runs: no error
        assert name


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Filters(START, START), "the time range is empty"),
        (lambda: Filters(START.replace(tzinfo=None), START), "time zone"),
        (lambda: filters(policy="fair"), "idle policy must be one of"),
        (lambda: bind("spend_over_time", filters(), dim="colour", bucket="day"), "dimension"),
        (lambda: bind("spend_over_time", filters(), dim="app", bucket="week"), "bucket"),
        (lambda: bind("spend_over_time", filters()), "needs bucket, dim"),
        (lambda: bind("no_such_query", filters()), "no dashboard query named"),
    ],
)
def test_bad_parameters_are_one_clear_error(make, message):
    with pytest.raises(QueryError, match=message):
        make()
