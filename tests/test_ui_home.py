"""The Overview on a fresh server: empty states that say why, then the Data panel counting the
spans as they arrive; the shell's keyboard order. (Home's ingest status moved into the
Overview's Data panel.)"""

from __future__ import annotations

import pytest
import requests
from playwright.sync_api import expect

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
