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

ROWS = "#requests-table tr:has(td.dash-cell)"
COST = "prefill_cost + decode_cost + idle_configured_cost"  # the default idle policy


def cells(page, column: str) -> list[str]:
    return page.locator(f'#requests-table td[data-dash-column="{column}"]').all_inner_texts()


def trace_ids(page) -> list[str]:
    links = page.locator('#requests-table td[data-dash-column="trace"] a')
    return [
        h.split("/trace/")[1].split("?")[0]
        for h in links.evaluate_all("els => els.map(e => e.getAttribute('href'))")
    ]


def wait_first_cell(page, column: str, text: str) -> None:
    page.wait_for_function(
        "([c, t]) => document.querySelector("
        "`#requests-table td[data-dash-column='${c}']`)?.innerText.trim() === t",
        arg=[column, text],
        timeout=10_000,
    )


def wait_total(page, n: int) -> None:
    """Until the explorer says it holds exactly `n` requests (not a number ending in n)."""
    page.wait_for_function(
        "t => document.getElementById('requests-total')?.innerText.startsWith(t)",
        arg=f"{n:,} request{'' if n == 1 else 's'} ·",
        timeout=10_000,
    )


def usd(text: str) -> float:
    return float(text.replace("$", "").replace(",", ""))


def test_explorer_pages_and_sorts_on_the_server(ledger_server, page) -> None:
    storage = ledger_server.storage
    total = storage.scalar("select count(*) from mart_requests")
    assert total > 1000  # the demo's ~3,000 requests

    page.goto(ledger_server.url + "/requests")
    wait_total(page, total)
    assert f"page 1 of {-(-total // 25):,}" in page.inner_text("#requests-total")
    # only one page of rows reached the browser, newest first, as mart_requests has them
    assert page.locator(ROWS).count() == 25
    newest = storage.fetchall(
        "select trace_id, strftime(start_time, '%Y-%m-%d %H:%M:%S') from mart_requests "
        "order by start_ns desc, span_id limit 50"
    )
    assert trace_ids(page) == [r[0] for r in newest[:25]]
    assert cells(page, "start_time") == [r[1] for r in newest[:25]]

    page.click("#requests-table button.next-page")
    wait_first_cell(page, "start_time", newest[25][1])
    assert page.locator(ROWS).count() == 25
    assert trace_ids(page) == [r[0] for r in newest[25:]]
    assert "page 2 of" in page.inner_text("#requests-total")

    # cost: the first click sorts ascending, the second descending (back on page 1)
    costs = [r[0] for r in storage.fetchall(f"select {COST} from mart_requests order by 1")]
    sort = '#requests-table th[data-dash-column="cost"] .column-header--sort'
    page.click(sort)
    wait_first_cell(page, "cost", f"${costs[0]:.5f}")
    page.click(sort)
    wait_first_cell(page, "cost", f"${costs[-1]:.5f}")
    shown = [usd(t) for t in cells(page, "cost")]
    assert shown == sorted(shown, reverse=True) and len(shown) == 25
    assert shown == pytest.approx(costs[::-1][:25], abs=6e-6)
    assert "page 1 of" in page.inner_text("#requests-total")


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
    assert set(cells(page, "app")) == {"code-assistant"}
    # every row's trace link keeps the filters
    hrefs = page.locator('#requests-table td[data-dash-column="trace"] a').evaluate_all(
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
    assert all(usd(c) >= round(floor, 5) for c in cells(page, "cost"))
    # the CSV holds every matching request (not just the page), with the same numbers
    with page.expect_download(timeout=10_000) as info:
        page.click("#requests-csv-button")
    target = tmp_path / "requests.csv"
    info.value.save_as(target)
    rows = list(csv.DictReader(io.StringIO(target.read_text())))
    assert len(rows) == above
    assert {r["app"] for r in rows} == {"code-assistant"}
    assert all(float(r["cost"]) >= floor for r in rows)
    shown = cells(page, "start_time")
    assert [r["start_time"] for r in rows[: len(shown)]] == shown
    # nothing matches: the empty state says which filter to widen
    page.fill("#requests-model", "no-such-model")
    page.press("#requests-model", "Enter")
    page.wait_for_selector("#requests-empty >> text=model contains 'no-such-model'")
    assert page.locator(ROWS).count() == 0


def test_a_row_opens_its_trace_waterfall(ledger_server, page) -> None:
    storage = ledger_server.storage
    page.goto(ledger_server.url + "/requests?range=7d")
    page.wait_for_selector(ROWS)
    choose(page, "requests-hosting", "Self-hosted")
    self_hosted = storage.scalar("select count(*) from mart_requests where hosting = 'self_hosted'")
    wait_total(page, self_hosted)
    trace_id = trace_ids(page)[0]

    page.click('#requests-table td[data-dash-column="trace"] a >> nth=0')
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
        ({"failed_only": True}, "failed"),
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
