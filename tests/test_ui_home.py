"""The Overview on a fresh server: empty states that say why, then the Data panel counting the
spans as they arrive; the shell's keyboard order. (Home's ingest status moved into the
Overview's Data panel.) The shell's filter bar: "Copy link" copies the view with its range
made absolute (or shows the link when the clipboard is refused), and the auto-refresh toggle
goes into the URL and re-runs the charts."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
import requests
from playwright.sync_api import expect

from app.filters import parse
from inferledger.fixtures import make_export_request

pytestmark = pytest.mark.browser


def test_overview_on_an_empty_ledger_then_the_data_panel_counts_spans(live, page) -> None:
    page.goto(live.url + "/")
    expect(page.locator("#overview-data")).to_contain_text("No spans yet")
    assert page.title() == "InferLedger"
    expect(page.locator("#overview-trend-empty")).to_contain_text("nothing has been ingested")
    expect(page.locator("#overview-kpi-spend")).to_have_text("$0.00")
    assert page.locator("#overview-kpi-forecast").inner_text() == "–"
    expect(page.locator("#overview-movers")).to_contain_text("nothing has been ingested")

    body = make_export_request(42, seed=1).SerializeToString()
    resp = requests.post(
        live.url + "/v1/traces",
        data=body,
        headers={"Content-Type": "application/x-protobuf"},
        timeout=10,
    )
    assert resp.status_code == 200
    assert live.storage.scalar("select count(*) from spans") == 42  # written from the spool
    page.reload()
    expect(page.locator("#overview-data-spans")).to_have_text("42")
    newest = live.storage.scalar("select max(last_span_at) from ingest_summary")
    expect(page.locator("#overview-data-newest")).to_have_text(f"{newest:%Y-%m-%d %H:%M:%S} UTC")
    # keyboard: a skip link first, then the brand link
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Skip to content"
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "InferLedger"


@pytest.fixture
def clipboard_page(browser) -> Iterator[Any]:
    """Like conftest's `page`, with the clipboard permitted (as a user's click grants it)."""
    context = browser.new_context(
        viewport={"width": 1280, "height": 800}, permissions=["clipboard-read", "clipboard-write"]
    )
    pg = context.new_page()
    errors: list[str] = []
    pg.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    yield pg
    context.close()
    assert errors == [], f"browser console errors: {errors}"


VIEW = "/spend?range=lastweek&team=finance-ops&idle=usage&by=route&refresh=60"


def test_copy_link_copies_the_view_with_an_absolute_range(live, clipboard_page) -> None:
    page = clipboard_page
    page.goto(live.url + VIEW)
    page.wait_for_selector("#spend-kpis .stat")
    page.locator("#filter-copy").click()
    expect(page.locator("#filter-copied")).to_contain_text("Copied")
    copied = page.evaluate("navigator.clipboard.readText()")
    expected = parse(VIEW.split("?")[1]).absolute(datetime.now(UTC)).query_string()
    assert copied == live.url + "/spend" + expected
    assert "range=custom&start=" in copied and "T00:00&end=" in copied
    assert "team=finance-ops" in copied and "idle=usage" in copied and "by=route" in copied
    assert "refresh" not in copied  # a fixed window has nothing new to fetch
    expect(page.locator("#filter-link")).to_be_hidden()
    # the copied link opens the same view, as a custom range
    page.goto(copied)
    page.wait_for_selector("#spend-kpis .stat")
    expect(page.locator("#filter-range-value")).to_have_text("Custom…")
    assert page.locator("#filter-problems").inner_text() == ""


def test_copy_link_shows_the_link_when_the_clipboard_is_refused(live, page) -> None:
    page.add_init_script(
        "navigator.clipboard.writeText = () => Promise.reject(new Error('denied'));"
    )
    page.goto(live.url + VIEW)
    page.wait_for_selector("#spend-kpis .stat")
    page.locator("#filter-copy").click()
    expect(page.locator("#filter-copied")).to_contain_text("clipboard was refused")
    field = page.locator("#filter-link")
    expect(field).to_be_visible()
    expect(field).to_have_value(
        live.url + "/spend" + parse(VIEW.split("?")[1]).absolute().query_string()
    )
    expect(field).to_be_focused()  # selected, ready for Ctrl+C


def test_auto_refresh_is_off_by_default_then_in_the_url_and_re_runs_the_charts(live, page) -> None:
    page.goto(live.url + "/spend?range=24h")
    toggle = page.get_by_label("every 60 s")
    expect(toggle).not_to_be_checked()
    toggle.check()
    page.wait_for_function("() => location.search.includes('refresh=60')")
    page.reload()
    expect(page.get_by_label("every 60 s")).to_be_checked()
    page.get_by_label("every 60 s").uncheck()
    page.wait_for_function("() => !location.search.includes('refresh')")
    # at the shortest interval a URL may ask for, the charts are fetched again on each tick
    page.goto(live.url + "/spend?range=24h&refresh=10")
    expect(page.get_by_label("every 10 s")).to_be_checked()
    page.wait_for_selector("#spend-kpis .stat")

    def ticked(request: Any) -> bool:
        if "/_dash-update-component" not in request.url:
            return False
        body = json.loads(request.post_data or "{}")
        return body.get("changedPropIds") == ["refresh-tick.data"] and "spend-kpis" in body.get(
            "output", ""
        )

    with page.expect_request(ticked, timeout=25_000):
        pass
