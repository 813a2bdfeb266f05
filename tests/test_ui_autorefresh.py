"""Auto-refresh reaches every live number, not only the charts: with the shell's toggle on, a
request that arrives (the real OTLP ingest path, then the ledger's refresh) moves the Overview's
tiles and the request explorer's total and rows at the next tick, without a reload. The
explorer reloads its rows only while its first row is in view: a reader scrolled down keeps
the rows under their eyes.

The tick is the shell's dcc.Interval at its 60 s; the browser's clock is Playwright's, moved
forward past one interval, so the test waits for no real minute (and a callback that does not
listen to the tick keeps its old number: nothing else redraws it)."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
import requests
from playwright.sync_api import expect

from app.components import number
from app.filters import filters_from
from inferledger.fixtures import make_export_request
from ledger import overview as ov
from tests.conftest import whole_days

pytestmark = pytest.mark.browser

#: Past one auto-refresh interval (app.filters.REFRESH_SECONDS, the toggle's).
ONE_TICK_MS = 61_000
SETTLED = """() => !document.querySelector('[data-dash-is-loading="true"]')
  && !document.querySelector('._dash-loading')"""
GRID = "requests-grid"
#: The request explorer's grid: its first displayed row's index and id, and how many rows.
GRID_STATE = """id => {
    const api = window.dash_ag_grid && dash_ag_grid.getApi(id);
    const first = api.getFirstDisplayedRowIndex();
    const node = api.getDisplayedRowAtIndex(first);
    return {first, id: node && node.data ? node.data.row_id : null,
            top: api.getDisplayedRowAtIndex(0)?.data?.trace_id ?? null};
}"""
GRID_READY = """id => {
    try {
        const api = window.dash_ag_grid && dash_ag_grid.getApi(id);
        const node = api && api.getDisplayedRowAtIndex(0);
        return !!(node && node.data);
    } catch (err) { return false; }  // getApi throws until the grid is initialised
}"""


def settle(page) -> None:
    page.wait_for_timeout(300)
    page.wait_for_function(SETTLED, timeout=20_000)


def arrive(live, n: int, seed: int, at: datetime) -> list[str]:
    """`n` vLLM requests starting at `at`, posted to the real OTLP endpoint; then the ledger's
    refresh (the server's own Refresher, as its scheduler runs it). Returns their trace ids."""
    start_ns = int(at.timestamp()) * 1_000_000_000
    body = make_export_request(n, seed=seed, start_ns=start_ns, id_offset=seed * 1_000)
    resp = requests.post(
        live.url + "/v1/traces",
        data=body.SerializeToString(),
        headers={"Content-Type": "application/x-protobuf"},
        timeout=10,
    )
    assert resp.status_code == 200, resp.text
    live.storage  # noqa: B018 - waits until the spool has written every span
    live.service.refresher.refresh(trigger="manual")
    return [span.trace_id.hex() for span in body.resource_spans[0].scope_spans[0].spans]


def tick(page) -> None:
    page.clock.fast_forward(ONE_TICK_MS)


def test_auto_refresh_moves_the_tiles_and_the_request_explorer(
    ledger_server, ledger_end, page
) -> None:
    live = ledger_server
    _, _, query = whole_days(ledger_end)
    filters = filters_from(query)
    page.clock.install()  # the page's timers run on, until the test jumps them forward
    page.goto(live.url + "/" + query)
    tile = page.locator("#overview-kpi-requests")
    before = ov.overview_kpis(live.storage, filters).requests
    expect(tile).to_have_text(number(before))

    # the user turns auto-refresh on with the filter bar's toggle
    page.get_by_label("every 60 s").check()
    page.wait_for_function("() => location.search.includes('refresh=60')")
    settle(page)  # the page redrawn for the new URL, before anything new arrives
    expect(tile).to_have_text(number(before))

    # enough new requests to change the tile as shown (it rounds: 13.3k)
    n = next(n for n in range(10, 10_000, 10) if number(before + n) != number(before))
    arrive(live, n, seed=71, at=ledger_end + timedelta(seconds=1))
    after = ov.overview_kpis(live.storage, filters).requests
    assert after == before + n  # the ledger has them: only the page is behind
    page.wait_for_timeout(500)
    assert tile.inner_text() == number(before)  # nothing redraws the tile but the tick
    tick(page)
    expect(tile).to_have_text(number(after), timeout=15_000)
    # the Data panel counts the new spans too
    spans = live.storage.scalar("select count(*) from spans")
    expect(page.locator("#overview-data-spans")).to_have_text(f"{spans:,}")

    # the request explorer, auto-refresh still on (it rides in the URL), at the grid's top
    page.goto(live.url + "/requests" + query + "&refresh=60")
    page.wait_for_function(GRID_READY, arg=GRID, timeout=20_000)
    settle(page)
    total = page.locator("#requests-total")
    expect(total).to_contain_text(f"{after:,} requests")
    newest = arrive(live, 3, seed=72, at=ledger_end + timedelta(seconds=2))
    tick(page)
    expect(total).to_contain_text(f"{after + 3:,} requests", timeout=15_000)
    # newest first and at the top: the new rows come in above the old ones
    page.wait_for_function(
        "([id, ids]) => ids.includes(dash_ag_grid.getApi(id).getDisplayedRowAtIndex(0)"
        "?.data?.trace_id)",
        arg=[GRID, newest],
        timeout=15_000,
    )

    # scrolled down, the rows stay where the reader left them; the total still moves
    page.evaluate("id => dash_ag_grid.getApi(id).ensureIndexVisible(150, 'top')", GRID)
    page.wait_for_function(
        "id => dash_ag_grid.getApi(id).getFirstDisplayedRowIndex() >= 140", arg=GRID
    )
    settle(page)
    seen = page.evaluate(GRID_STATE, GRID)
    arrive(live, 5, seed=73, at=ledger_end + timedelta(seconds=3))
    tick(page)
    expect(total).to_contain_text(f"{after + 8:,} requests", timeout=15_000)
    settle(page)
    assert page.evaluate(GRID_STATE, GRID) == seen  # same first row, not shifted by 5
