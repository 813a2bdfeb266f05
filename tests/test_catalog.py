"""The analyst view catalog (ledger/catalog.py, sql/catalog.yaml): it matches the real views
column for column, docs/views.md is its rendering, its example queries run, and the API's page
query binds every value."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from importlib import resources
from pathlib import Path

import pytest

from inferledger.core.storage import compile_statement
from inferledger.ledger_fixtures import worked_example
from ledger import catalog as cat
from ledger.catalog import (
    ANALYST_VIEWS,
    CatalogError,
    ColumnDoc,
    UnknownViewError,
    catalog_markdown,
    catalog_problems,
    load_catalog,
    page_statement,
    parse_catalog,
)
from ledger.marts import refresh

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs" / "views.md"


def test_every_view_column_has_metadata_and_no_more(storage) -> None:
    assert catalog_problems(storage) == []


def test_the_check_finds_a_missing_and_an_extra_column(storage) -> None:
    real = load_catalog()
    section = real.sections[0]
    costs = section.views[0]
    assert costs.name == "request_costs"
    changed = dataclasses.replace(
        costs,
        columns=(*costs.columns[1:], ColumnDoc("no_such_column", "", "made up")),
    )
    broken = dataclasses.replace(
        real,
        sections=(dataclasses.replace(section, views=(changed, *section.views[1:])),
                  *real.sections[1:]),
    )  # fmt: skip
    assert catalog_problems(storage, broken) == [
        "request_costs.trace_id: column has no entry in sql/catalog.yaml",
        "request_costs.no_such_column: sql/catalog.yaml names a missing column",
    ]


def test_analyst_views_are_the_views_but_staging() -> None:
    files = {
        p.name.removesuffix(".sql")
        for p in resources.files("sql").joinpath("views").iterdir()
        if p.name.endswith(".sql")
    }
    assert set(ANALYST_VIEWS) == {f for f in files if not f.startswith("stg_")}
    assert tuple(v.name for v in load_catalog().views) == ANALYST_VIEWS
    for doc in load_catalog().views:
        assert 1 <= len(doc.examples) <= 3 and doc.order_by, doc.name
        first_line = (
            resources.files("sql").joinpath("views", f"{doc.name}.sql").read_text().splitlines()[0]
        )
        assert first_line.startswith("-- one row"), doc.name
        assert doc.grain.startswith("one row"), doc.name


def test_docs_views_md_is_generated(storage) -> None:
    assert DOCS.read_text(encoding="utf-8") == catalog_markdown(storage), (
        "docs/views.md differs from the catalog: run "
        "`python -m ledger.catalog --markdown > docs/views.md`"
    )


def test_the_markdown_command_prints_the_same(storage) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "ledger.catalog", "--markdown"],
        cwd=ROOT, capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    assert out.stdout == catalog_markdown(storage)


def test_every_example_query_runs_and_keys_are_unique(storage) -> None:
    end = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    worked_example(storage, int((end - timedelta(hours=3)).timestamp() * 1e9))
    refresh(storage)
    rows = {}
    for doc in load_catalog().views:
        for example in doc.examples:
            assert f"from {doc.name}" in example.sql, (doc.name, example.title)
            rows[example.title] = storage.query_arrow(example.sql).num_rows  # raises if broken
    # the worked example's requests, 3 hours ago, are in "the last 7 days" windows
    assert rows["cost per 1M output tokens by model over the last 7 days"] >= 1
    assert rows["spend by team and stage over the last 7 days, idle shared by usage"] >= 1
    # keyset paging needs each view's order_by to be unique per row (NULLs equal)
    for doc in load_catalog().views:
        keys = ", ".join(doc.order_by)
        repeated = storage.scalar(
            f"select count(*) from (select {keys} from {doc.name} group by all having count(*) > 1)"
        )
        assert repeated == 0, doc.name


def test_page_statement_binds_every_value() -> None:
    doc = load_catalog().view("request_costs")
    start = datetime(2026, 11, 1, tzinfo=UTC)
    sql, params = compile_statement(
        page_statement(doc, "TIMESTAMP WITH TIME ZONE", start=start, end=None, limit=10)
    )
    assert params == [start, 10]
    assert "2026" not in sql and "?" in sql
    assert (
        "ORDER BY request_costs.start_time ASC NULLS FIRST, request_costs.trace_id ASC NULLS"
        " FIRST, request_costs.span_id ASC NULLS FIRST \n LIMIT ?"
    ) in sql
    after = [start, "ab' or 1=1 --", None]
    sql, params = compile_statement(
        page_statement(doc, "TIMESTAMP WITH TIME ZONE", start=None, end=None, limit=5, after=after)
    )
    assert "or 1=1" not in sql and "ab'" in str(params)
    assert params[0] == start and params[-1] == 5


def test_keyset_pages_walk_a_view_with_null_keys(storage) -> None:
    """Pages of spend_hourly (NULL app and workflow on idle rows) after each last row add up
    to the whole view in order, whatever the page size."""
    hours = (
        "range(timestamptz '2026-11-01 00:00+00', timestamptz '2026-11-01 06:00+00',"
        " interval 1 hour)"
    )
    storage.execute_write(
        "insert into mart_spend_hourly (hour, environment, app, team, route, workflow, model,"
        " deployment, stage, requests, input_tokens, output_tokens, cost_separate, cost_usage,"
        " cost_even, cost_configured)"
        " select h, 'prod', a, t, '/c', w, 'm', 'd1', s, 1, 1, 1, 1, 1, 1, 1"
        f" from {hours} r(h), (values ('chat', 'a', 'wf', 'decode'), ('chat', 'b', null, 'decode'),"
        " (null, null, null, 'idle')) v(a, t, w, s)"
    )
    doc = load_catalog().view("spend_hourly")
    whole = storage.query_arrow(*compile_statement(
        page_statement(doc, "TIMESTAMP WITH TIME ZONE", start=None, end=None, limit=1000)
    )).to_pylist()  # fmt: skip
    assert len(whole) == 6 * 3 * 4
    for size in (1, 5, 7, 71):
        rows, after = [], None
        while True:
            page = storage.query_arrow(*compile_statement(page_statement(
                doc, "TIMESTAMP WITH TIME ZONE", start=None, end=None, limit=size, after=after
            ))).to_pylist()  # fmt: skip
            rows += page
            if len(page) < size:
                break
            after = cat.key_values(doc, page[-1])
        assert rows == whole, size


def test_date_columns_take_the_days_a_range_touches() -> None:
    start = datetime(2026, 11, 1, 23, tzinfo=UTC)
    lo, hi = cat.time_bounds("DATE", start, datetime(2026, 11, 3, 0, 30, tzinfo=UTC))
    assert (str(lo), str(hi)) == ("2026-11-01", "2026-11-04")
    lo, hi = cat.time_bounds("DATE", None, datetime(2026, 11, 3, tzinfo=UTC))
    assert lo is None and str(hi) == "2026-11-03"


def test_unknown_views_are_refused() -> None:
    with pytest.raises(UnknownViewError, match="no analyst view named 'stg_spans'"):
        load_catalog().view("stg_spans")
    assert UnknownViewError.http_status == 404


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("preamble: x\n", "needs a list of sections"),
        ("preamble: x\nsections: [{title: T, views: []}]\n", "lists no views"),
        (
            "preamble: x\nsections: [{title: T, views: [{name: v, grain: g, what_for: w,"
            " order_by: [b], columns: {a: m}, examples: [{title: t, sql: s}]}]}]\n",
            "'b' is not one of its columns",
        ),
        (
            "preamble: x\nsections: [{title: T, views: [{name: v, grain: g, what_for: w,"
            " order_by: [a], columns: {a: m}, examples: []}]}]\n",
            "give 1 to 3 examples",
        ),
        ("sections: [\n", "sql/catalog.yaml"),
    ],
)
def test_malformed_metadata_is_named(text: str, message: str) -> None:
    with pytest.raises(CatalogError, match=message.replace("(", r"\(")):
        parse_catalog(text)


def test_units_are_split_from_meanings() -> None:
    costs = load_catalog().view("request_costs")
    assert costs.column("cost") == ColumnDoc(
        "cost", "currency", "prefill_cost + decode_cost (idle shown separately)"
    )
    assert costs.column("trace_id").unit == ""
