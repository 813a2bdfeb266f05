"""The SQL page in a real browser (issue #14): an analyst runs a query and sees its rows, a
hostile query shows its refusal, a saved query opens from its share link, and a viewer cannot
open the page. A real service with sign-in on; the console's real worker processes."""

from __future__ import annotations

import pytest
import requests

from ledger import users
from tests.conftest import sign_in

pytestmark = pytest.mark.browser

ANALYST = ("ana", "ana-analyst-password")
VIEWER = ("vic", "vic-viewer-password")


def _service(live_factory):
    live = live_factory(auth__enabled=True, console__timeout_s=3.0)
    users.add_user(live.service.storage, ANALYST[0], "analyst", ANALYST[1], by="test")
    users.add_user(live.service.storage, VIEWER[0], "viewer", VIEWER[1], by="test")
    return live


_MESSAGE = (
    "() => { const m = document.getElementById('sql-message'); return m ? m.textContent : ''; }"
)


def _run(page, sql: str) -> str:
    """Run `sql` from the page and return the message of its answer (not the previous one's:
    the message must change and the Run button be enabled again)."""
    before = page.evaluate(_MESSAGE)
    page.fill("#sql-editor", sql)
    page.click("#sql-run")
    page.wait_for_function(
        "(before) => { const m = document.getElementById('sql-message');"
        " return m && m.textContent.trim() && m.textContent !== before"
        " && !document.getElementById('sql-run').disabled; }",
        arg=before,
    )
    return page.inner_text("#sql-message")


def test_an_analyst_queries_and_a_hostile_query_is_refused(live_factory, tab) -> None:
    page, _console = tab
    live = _service(live_factory)
    sign_in(page, live.url, *ANALYST, path="/sql")
    page.wait_for_selector("#sql-editor")
    # the editor starts with an example, highlighted, and completes view names
    page.wait_for_function(
        "() => { const e = document.getElementById('sql-editor'); return e && e.value; }"
    )
    page.wait_for_selector(".sql-highlight .sql-kw")
    page.fill("#sql-editor", "")
    page.type("#sql-editor", "select * from spend_da")  # keystrokes open the completion list
    page.wait_for_selector(".sql-complete li")
    assert "spend_daily" in page.inner_text(".sql-complete")

    text = _run(page, "select 41 + range as answer, 'row ' || range as label from range(3)")
    assert "3 rows" in text
    page.wait_for_selector(".ag-cell[col-id='answer']")
    cells = page.locator(".ag-cell[col-id='answer']").all_inner_texts()
    assert sorted(cells) == ["41", "42", "43"]

    refused = _run(page, "select * from read_csv('/etc/passwd')")
    assert refused.startswith("Refused:") and "read_csv()" in refused
    assert page.locator(".ag-cell").count() == 0
    stopped = _run(page, "select 1; drop table spend_daily")
    assert "one statement at a time" in stopped

    # save it, then open the share link in the same session
    page.fill("#sql-editor", "select 7 as seven")
    page.fill("#sql-name", "lucky")
    page.click("#sql-save")
    page.wait_for_selector("#sql-share-link a")
    href = page.get_attribute("#sql-share-link a", "href")
    assert href and href.startswith("/sql?q=")
    page.goto(live.url + href)
    page.wait_for_function(
        "() => { const e = document.getElementById('sql-editor');"
        " return e && e.value === 'select 7 as seven'; }"
    )
    # the history lists the runs, newest first; a click puts one back in the editor
    page.wait_for_selector(".sql-history button")
    assert "refused" in page.inner_text(".sql-history")
    page.locator(".sql-history button", has_text="read_csv").click()
    page.wait_for_function(
        "() => document.getElementById('sql-editor').value.includes('/etc/passwd')"
    )


def test_a_viewer_cannot_open_the_sql_page(live_factory, tab) -> None:
    page, console = tab
    live = _service(live_factory)
    console.expect("Failed to load resource")  # the 403 answer
    sign_in(page, live.url, *VIEWER, path="/sql")
    page.wait_for_selector("text=Not allowed")
    assert page.locator("#sql-editor").count() == 0
    # and the page's callbacks refuse a viewer too
    cookies = {c["name"]: c["value"] for c in page.context.cookies()}
    body = {
        "output": "sql-download.data",
        "outputs": {"id": "sql-download", "property": "data"},
        "inputs": [{"id": "sql-csv", "property": "n_clicks", "value": 1}],
        "changedPropIds": ["sql-csv.n_clicks"],
        "state": [{"id": "sql-last-sql", "property": "data", "value": "select 1"}],
    }
    resp = requests.post(
        live.url + "/_dash-update-component", json=body, cookies=cookies, timeout=10
    )
    assert resp.status_code in (401, 403)
