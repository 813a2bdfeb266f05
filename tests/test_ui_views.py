"""The Views page in a real browser against a real server: an analyst sees the catalog's views
with their typed columns, example queries and download links that follow the days picked; a
viewer is refused the page."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from playwright.sync_api import expect

from ledger import users
from tests.conftest import LiveService, sign_in

pytestmark = pytest.mark.browser

ANALYST = ("ana", "ana-analyst-password")


def test_an_analyst_sees_views_and_download_links(secured: LiveService, tab: Any) -> None:
    users.add_user(secured.service.storage, ANALYST[0], "analyst", ANALYST[1], by="test")
    page, _ = tab
    sign_in(page, secured.url, *ANALYST, "/views")
    view = page.locator("#views-view-spend_hourly")
    view.locator("summary").click()
    columns = view.locator("table")
    expect(columns).to_contain_text("idle_policy")
    expect(columns).to_contain_text("TIMESTAMP WITH TIME ZONE")
    expect(columns).to_contain_text("currency")
    expect(view.locator("pre.views-sql").first).to_contain_text("from spend_hourly")
    csv_link = view.get_by_role("link", name="CSV")
    expect(csv_link).to_have_attribute("href", "/download/views/spend_hourly?" + _query(csv_link))
    page.fill("#views-from", "2026-11-01")
    page.fill("#views-to", "2026-11-02")
    expect(page.locator("#views-range-note")).to_contain_text("2 days")
    expect(csv_link).to_have_attribute(
        "href",
        "/download/views/spend_hourly?from=2026-11-01T00%3A00%3A00Z"
        "&to=2026-11-03T00%3A00%3A00Z&format=csv",
    )
    # the link downloads (app/downloads.py) with the analyst's session
    got = page.request.get(secured.url + csv_link.get_attribute("href"))
    assert got.status == 200 and got.text().splitlines()[0].startswith("hour,idle_policy,")
    # the FOCUS export follows the same days (app/downloads.py's /download/focus)
    focus = page.get_by_role("link", name="FOCUS 1.3 Parquet")
    expect(focus).to_have_attribute(
        "href",
        "/download/focus?version=1.3&from=2026-11-01T00%3A00%3A00Z"
        "&to=2026-11-03T00%3A00%3A00Z&format=parquet",
    )
    got = page.request.get(secured.url + focus.get_attribute("href"))
    assert got.status == 200 and got.body()[:4] == b"PAR1"
    # a view without a time column links every row, whatever the days
    replicas_view = page.locator("#views-view-deployment_replicas")
    replicas_view.locator("summary").click()
    replicas = replicas_view.get_by_role("link", name="Parquet")
    expect(replicas).to_have_attribute("href", "/download/views/deployment_replicas?format=parquet")


def _query(link: Any) -> str:
    href = link.get_attribute("href")
    query = parse_qs(urlsplit(href).query)
    assert set(query) == {"from", "to", "format"} and query["format"] == ["csv"]
    return urlsplit(href).query


def test_a_viewer_is_refused_the_page(secured: LiveService, tab: Any) -> None:
    page, console = tab
    console.expect("Failed to load resource.*403")
    sign_in(page, secured.url, "vic", "vic-viewer-pass", "/views")
    page.wait_for_selector("text=Not allowed")
    assert page.locator("#views-view-spend_hourly").count() == 0
    resp = page.request.get(secured.url + "/views")
    assert resp.status == 403
