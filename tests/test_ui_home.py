"""The UI shell in a real headless Chromium against a real server."""

from __future__ import annotations

import pytest
import requests

from inferledger.fixtures import make_export_request

pytestmark = pytest.mark.browser


def test_home_shows_ingest_status(live, page) -> None:
    page.goto(live.url + "/")
    page.wait_for_selector("text=No spans yet")
    assert page.title() == "InferLedger"

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
    page.wait_for_selector(".stat-value")
    stats = page.locator(".stat-value").all_inner_texts()
    assert stats[0] == "42" and stats[1] == "42" and stats[2] == "1"
    assert page.locator("table td").first.inner_text() == "vllm"
    # keyboard: a skip link first, then the brand link
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Skip to content"
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "InferLedger"
