"""The request explorer and the trace view in a real headless Chromium against a real server on
the demo ledger: server-side pages and sorting that agree with mart_requests, the global filters
in the URL, a row's link to its trace's waterfall, and clear messages for bad trace ids. The
`page` fixture fails any test that logs a browser console error."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest
import requests

from app.components import money
from inferledger.fixtures import make_export_request
from ledger.queries import Filters, QueryError, run
from tests.conftest import choose

pytestmark = pytest.mark.browser

GRID = "#requests-grid"
COST = "prefill_cost + decode_cost + idle_configured_cost"  # the default idle policy
ROWS = f"{GRID} .ag-center-cols-container .ag-row[row-index]"


def grid_data(page, first: int = 0, count: int = 100) -> list[dict]:
    """The rows the grid holds at indexes [first, first + count), in order (loaded blocks)."""
    return page.evaluate(
        """([first, count]) => {
            const api = dash_ag_grid.getApi('requests-grid');
            const out = [];
            for (let i = first; i < first + count; i++) {
                const node = api.getDisplayedRowAtIndex(i);
                if (!node || !node.data) break;
                out.push(node.data);
            }
            return out;
        }""",
        [first, count],
    )


def wait_grid(page, predicate: str, arg=None, timeout: int = 15_000) -> None:
    """Until `predicate(api, arg)` holds for the grid's API. dash-ag-grid's getApi throws until
    the grid is initialised (a slow CI page), which would end the wait at once: keep polling."""
    page.wait_for_function(
        "arg => { let api;"
        " try { api = dash_ag_grid.getApi('requests-grid'); } catch (e) { return false; }"
        f" return !!({predicate})(api, arg); }}",
        arg=arg,
        timeout=timeout,
    )


def wait_rows(page, first: int, key: str, value) -> None:
    """Until the grid's row `first` is loaded and its `key` is `value`."""
    wait_grid(
        page,
        """(api, [first, key, value]) => {
            const node = api.getDisplayedRowAtIndex(first);
            return !!(node && node.data && node.data[key] === value);
        }""",
        [first, key, value],
    )


def cells(page, column: str) -> list[str]:
    """The text of the rendered cells of a column, top to bottom."""
    return page.evaluate(
        """(col) => Array.from(document.querySelectorAll(
                '#requests-grid .ag-center-cols-container .ag-row[row-index]'))
            .sort((a, b) => a.getAttribute('row-index') - b.getAttribute('row-index'))
            .map(r => r.querySelector(`.ag-cell[col-id="${col}"]`)?.innerText.trim())""",
        column,
    )


def wait_total(page, n: int) -> None:
    """Until the explorer says it holds exactly `n` requests (not a number ending in n)."""
    page.wait_for_function(
        "t => document.getElementById('requests-total')?.innerText.startsWith(t)",
        arg=f"{n:,} request{'' if n == 1 else 's'} ·",
        timeout=10_000,
    )


def row_count(page) -> int:
    return page.evaluate("() => dash_ag_grid.getApi('requests-grid').getDisplayedRowCount()")


def usd(text: str) -> float:
    return float(text.split()[0].replace("$", "").replace(",", ""))


def test_explorer_pages_and_sorts_on_the_server(ledger_server, page) -> None:
    storage = ledger_server.storage
    total = storage.scalar("select count(*) from mart_requests")
    assert total > 1000  # the demo's ~3,000 requests

    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto(ledger_server.url + "/requests")
    wait_total(page, total)
    newest = storage.fetchall(
        "select trace_id, strftime(start_time, '%Y-%m-%d %H:%M:%S') from mart_requests "
        "order by start_ns desc, span_id limit 200"
    )
    wait_rows(page, 0, "trace_id", newest[0][0])
    # one block of rows reached the browser, newest first, as mart_requests has them
    assert [r["trace_id"] for r in grid_data(page, 0, 200)] == [r[0] for r in newest[:100]]
    assert row_count(page) == total  # the server's count: the scroll bar spans every row
    shown = cells(page, "start_time")
    assert 5 <= len(shown) < 100 and shown == [r[1] for r in newest[: len(shown)]]
    # the cost column is on screen at 1280 px, with no horizontal scroll bar
    box = page.locator(f'{GRID} .ag-header-cell[col-id="cost"]').bounding_box()
    assert box and box["x"] >= 0 and box["x"] + box["width"] <= 1280
    assert page.evaluate(
        "() => { const v = document.querySelector('#requests-grid .ag-center-cols-viewport');"
        " return v.scrollWidth <= v.clientWidth + 1; }"
    )

    # scrolling asks the server for the next block
    page.evaluate("() => dash_ag_grid.getApi('requests-grid').ensureIndexVisible(150)")
    wait_rows(page, 150, "trace_id", newest[150][0])
    assert [r["trace_id"] for r in grid_data(page, 100, 100)] == [r[0] for r in newest[100:200]]

    # cost: the first click sorts descending (the dearest first), the second ascending
    costs = [r[0] for r in storage.fetchall(f"select {COST} from mart_requests order by 1")]
    header = page.locator(f'{GRID} .ag-header-cell[col-id="cost"] .ag-header-cell-label')
    header.click()
    wait_grid(
        page,
        "(api, v) => { const n = api.getDisplayedRowAtIndex(0);"
        " return !!(n && n.data && Math.abs(n.data.cost - v) < 1e-12); }",
        costs[-1],
        timeout=15_000,
    )
    top = [r["cost"] for r in grid_data(page, 0, 100)]
    assert top == pytest.approx(costs[::-1][:100], abs=1e-12)
    assert usd(cells(page, "cost")[0]) == pytest.approx(costs[-1], abs=6e-6)
    header.click()
    wait_grid(
        page,
        "(api, v) => { const n = api.getDisplayedRowAtIndex(0);"
        " return !!(n && n.data && Math.abs(n.data.cost - v) < 1e-12); }",
        costs[0],
        timeout=15_000,
    )
    assert [r["cost"] for r in grid_data(page, 0, 100)] == pytest.approx(costs[:100], abs=1e-12)
    # columns that the query cannot sort do not offer it: a click changes nothing
    page.locator(f'{GRID} .ag-header-cell[col-id="model"] .ag-header-cell-label').click()
    model_header = page.locator(f'{GRID} .ag-header-cell[col-id="model"]')
    assert model_header.get_attribute("aria-sort") in (None, "none")
    assert grid_data(page, 0, 1)[0]["cost"] == pytest.approx(costs[0], abs=1e-12)


def test_filters_narrow_the_rows_and_the_url(ledger_server, page, tmp_path: Path) -> None:
    storage = ledger_server.storage
    page.goto(ledger_server.url + "/requests")
    everything = storage.scalar("select count(*) from mart_requests")
    wait_total(page, everything)

    choose(page, "filter-app", "code-assistant")
    page.wait_for_url("**app=code-assistant**", timeout=10_000)
    apps = storage.scalar("select count(*) from mart_requests where app = 'code-assistant'")
    assert 0 < apps < everything
    wait_total(page, apps)
    wait_grid(
        page,
        "(api, n) => api.getDisplayedRowCount() === n",
        apps,
        timeout=15_000,
    )
    wait_rows(page, 0, "app", "code-assistant")
    assert {r["app"] for r in grid_data(page)} == {"code-assistant"}
    # every row's trace link keeps the filters
    page.wait_for_selector(f'{GRID} .ag-cell[col-id="trace"] a')
    hrefs = page.locator(f'{GRID} .ag-cell[col-id="trace"] a').evaluate_all(
        "els => els.map(e => e.getAttribute('href'))"
    )
    assert hrefs and all(h.endswith("app=code-assistant") for h in hrefs)

    # the explorer's own filters narrow further: a minimum cost
    floor = storage.scalar(
        f"select quantile_disc({COST}, 0.9) from mart_requests where app = 'code-assistant'"
    )
    above = storage.scalar(
        f"select count(*) from mart_requests where app = 'code-assistant' and {COST} >= ?",
        [floor],
    )
    page.fill("#requests-min-cost", repr(floor))
    page.press("#requests-min-cost", "Enter")
    wait_total(page, above)
    wait_grid(
        page,
        "(api, n) => api.getDisplayedRowCount() === n",
        above,
        timeout=15_000,
    )
    data = grid_data(page)
    assert data and all(r["cost"] >= floor for r in data)
    # the CSV holds every matching request (no cap), with the header lines that say what it is
    with page.expect_download(timeout=30_000) as info:
        page.click("#requests-csv-button")
    assert info.value.suggested_filename.startswith("inferledger-requests_")
    assert "app-code-assistant" in info.value.suggested_filename
    target = tmp_path / "requests.csv"
    info.value.save_as(target)
    text = target.read_text()
    comments = [line for line in text.splitlines() if line.startswith("#")]
    assert comments[0] == "# InferLedger export: requests"
    assert "# filters: app=code-assistant" in comments and f"# rows: {above}" in comments
    rows = list(csv.DictReader(line for line in io.StringIO(text) if not line.startswith("#")))
    assert len(rows) == above
    assert {r["app"] for r in rows} == {"code-assistant"}
    assert all(float(r["cost"]) >= floor for r in rows)
    assert [r["span_id"] for r in rows[: len(data)]] == [r["row_id"].split(":")[1] for r in data]
    # nothing matches: the empty state says which filter to widen
    page.fill("#requests-model", "no-such-model")
    page.press("#requests-model", "Enter")
    page.wait_for_selector("#requests-empty >> text=model contains 'no-such-model'")
    wait_grid(
        page,
        "(api) => api.getDisplayedRowCount() === 0",
        timeout=15_000,
    )


def test_a_row_opens_its_trace_waterfall(ledger_server, page) -> None:
    storage = ledger_server.storage
    page.goto(ledger_server.url + "/requests?range=7d")
    page.wait_for_selector(ROWS)
    choose(page, "requests-hosting", "Self-hosted")
    self_hosted = storage.scalar("select count(*) from mart_requests where hosting = 'self_hosted'")
    wait_total(page, self_hosted)
    wait_grid(
        page,
        "(api, n) => api.getDisplayedRowCount() === n",
        self_hosted,
        timeout=15_000,
    )
    wait_rows(page, 0, "hosting", "Self-hosted")
    trace_id = grid_data(page, 0, 1)[0]["trace_id"]

    link = page.locator(f'{GRID} .ag-row[row-index="0"] .ag-cell[col-id="trace"] a')
    link.wait_for()
    # the keyboard way: the link takes the focus, Enter follows it (the grid lets it through)
    link.focus()
    page.keyboard.press("Enter")
    page.wait_for_url(f"**/trace/{trace_id}?range=7d", timeout=10_000)
    page.wait_for_function(
        "() => document.querySelector('#trace-waterfall .js-plotly-plot')?.data?.length > 0",
        timeout=10_000,
    )
    labels = page.evaluate(
        "() => document.querySelector('#trace-waterfall .js-plotly-plot')"
        ".layout.annotations.map(a => a.text)"
    )
    spans = storage.scalar("select count(*) from spans where trace_id = ?", [trace_id])
    assert len(labels) == spans
    # the app's root span comes first (marked ✖ when it failed)
    assert labels[0].removeprefix("✖ ").startswith("POST /")
    assert "llm_request" in labels  # vLLM's engine span, under the app's LLM call
    # the span picker's callback shows the root's details (after the waterfall's)
    page.wait_for_selector("#trace-details h2 >> text=Span POST /")

    # the trace's LLM cost is the ledger's, in the page's money format
    cost = storage.scalar(f"select sum({COST}) from mart_requests where trace_id = ?", [trace_id])
    assert page.locator("#trace-stats .stat-value").nth(4).inner_text() == money(cost, 4)
    assert page.get_attribute("#trace-back", "href") == "/requests?range=7d"

    # clicking an engine bar shows that span's attributes
    names = page.evaluate(
        "() => document.querySelector('#trace-waterfall .js-plotly-plot').data.map(t => t.name)"
    )
    decode = names.index("engine: decode")
    page.locator("#trace-waterfall g.trace.bars").nth(decode).locator("path").first.click(
        force=True
    )
    page.wait_for_selector("#trace-details h2 >> text=llm_request")
    assert "gen_ai.latency.time_to_first_token" in page.inner_text("#trace-details")
    assert "service.instance.id" in page.inner_text("#trace-details")
    # the keyboard way: the span picker
    page.click("#trace-span")
    page.get_by_placeholder("Search").fill("chat ")
    page.get_by_role("option").filter(has_text="chat ").first.click()
    page.wait_for_selector("#trace-details h2 >> text=chat ")
    assert "gen_ai.operation.name" in page.inner_text("#trace-details")

    # back to the explorer, filters kept, client-side
    page.click("#trace-back")
    page.wait_for_url("**/requests?range=7d", timeout=10_000)
    page.wait_for_selector(ROWS)


def test_bad_and_unknown_trace_ids_say_so(ledger_server, page) -> None:
    page.goto(ledger_server.url + "/trace/not-a-trace-id")
    page.wait_for_selector("#trace-message >> text=is not a trace id")
    assert not page.locator("#trace-waterfall").is_visible()

    unknown = "0123456789abcdef0123456789abcdef"
    page.goto(ledger_server.url + f"/trace/{unknown}")
    page.wait_for_selector(f"#trace-message >> text=No spans for trace {unknown}")
    assert "older than retention" in page.inner_text("#trace-message")
    assert not page.locator("#trace-waterfall").is_visible()


SORTS = {
    "cost": COST,
    "tokens": "coalesce(input_tokens, 0) + coalesce(output_tokens, 0)",
    "e2e": "e2e_s",
    "ttft": "ttft_s",
}


@pytest.mark.parametrize("descending", [True, False])
def test_every_sort_key_and_filter_agrees_with_mart_requests(
    ledger_server, ledger_end, descending
) -> None:
    """The explorer's queries against plain SQL over mart_requests, for every allowlisted sort
    and every explorer filter; an unknown sort key sorts by start, never by anything else."""
    storage = ledger_server.storage
    filters = Filters.last(7, now=ledger_end)  # the whole ledger, whenever the test runs
    base = {
        "hosting": None,
        "failed_only": False,
        "model_like": None,
        "min_cost": None,
        "limit": 40,
        "offset": 20,
    }
    order = "desc" if descending else "asc"
    orders = {key: f"{expr} {order} nulls last, start_ns desc" for key, expr in SORTS.items()}
    orders["start"] = f"start_ns {order}"
    for key, by in orders.items():
        got = run(storage, "requests_explorer", filters, sort=key, descending=descending, **base)
        want = storage.fetchall(
            f"select span_id from mart_requests order by {by}, span_id limit 40 offset 20"
        )
        assert got.column("span_id").to_pylist() == [r[0] for r in want], key
    bogus = run(storage, "requests_explorer", filters, sort="1; drop", descending=True, **base)
    by_start = run(storage, "requests_explorer", filters, sort="start", descending=True, **base)
    assert bogus.column("span_id").to_pylist() == by_start.column("span_id").to_pylist()
    # the default order's own query file gives the generic query's rows, all columns
    for extra in ({}, {"hosting": "self_hosted", "model_like": "8b", "min_cost": 0.001}):
        newest = run(storage, "requests_explorer_newest", filters, **{**base, **extra})
        generic = run(
            storage,
            "requests_explorer",
            filters,
            sort="start",
            descending=True,
            **{**base, **extra},
        )
        assert newest.num_rows == 40 and newest.to_pylist() == generic.to_pylist()

    cases = [
        ({"hosting": "hosted"}, "hosting = 'hosted'"),
        ({"hosting": "self_hosted"}, "hosting = 'self_hosted'"),
        (
            {"failed_only": True},
            "failed or trace_id in (select trace_id from spans where parent_span_id is null"
            " and status_code = 2)",
        ),
        ({"model_like": "70B"}, "model ilike '%70b%'"),
        ({"min_cost": 0.01}, f"{COST} >= 0.01"),
    ]
    for extra, where in cases:
        args = {**base, **extra, "limit": 100_000, "offset": 0}
        rows = run(storage, "requests_explorer", filters, sort="cost", descending=True, **args)
        summary = run(
            storage, "requests_explorer_summary", filters, sort="cost", page_size=25, **args
        ).to_pylist()[0]
        want = storage.fetchall(
            f"select count(*), coalesce(sum({COST}), 0) from mart_requests where {where}"
        )[0]
        assert rows.num_rows == summary["requests"] == want[0], extra
        assert summary["cost"] == pytest.approx(want[1], rel=1e-9)
        assert summary["pages"] == -(-want[0] // 25)
    assert storage.scalar("select count(*) from mart_requests where hosting = 'hosted'") > 0
    with pytest.raises(QueryError, match="needs"):
        run(storage, "requests_explorer", filters)  # the explorer's parameters are required


def test_a_trace_outside_the_ledger_is_looked_up_by_id_alone(live_factory, page) -> None:
    """Spans the ledger has not costed (its refresh is off here): the view still finds them,
    by trace id alone, and says so; an engine span whose parent never arrived is a root."""
    live = live_factory(ledger__refresh_interval_s=0)
    body = make_export_request(3, seed=5).SerializeToString()
    resp = requests.post(
        live.url + "/v1/traces",
        data=body,
        headers={"Content-Type": "application/x-protobuf"},
        timeout=10,
    )
    assert resp.status_code == 200
    trace_id = (5 * 1_000_003 + 1).to_bytes(16, "big").hex()
    assert live.storage.scalar("select count(*) from spans where trace_id = ?", [trace_id]) == 1
    assert live.storage.scalar("select count(*) from mart_requests") == 0

    page.goto(live.url + f"/trace/{trace_id}")
    page.wait_for_selector("#trace-message >> text=not in the cost ledger")
    assert "may be slow" in page.inner_text("#trace-message")
    assert "shown as roots" in page.inner_text("#trace-message")
    page.wait_for_selector("#trace-details h2 >> text=llm_request")
    plot = page.evaluate(
        "() => { const p = document.querySelector('#trace-waterfall .js-plotly-plot');"
        " return {labels: p.layout.annotations.map(a => a.text), names: p.data.map(t => t.name)};"
        " }"
    )
    assert plot["labels"] == ["llm_request"]
    assert {"engine: prefill", "engine: decode"} <= set(plot["names"])
    assert "no LLM call of this trace" in page.inner_text("#trace-calls")
