"""The Overview in a real headless Chromium against a real server on the demo ledger: every
tile is the marts' number, the filters and the URL drive it, the trend chart and the top movers
are drawn, and the movers' CSV is the table."""

from __future__ import annotations

import csv
import io
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlencode

import pytest
from playwright.sync_api import expect

from app.components import money, number

pytestmark = pytest.mark.browser

READY = """() => {
  if (document.querySelector('[data-dash-is-loading="true"]')) return false;
  const plot = document.querySelector('#overview-trend .js-plotly-plot');
  return !!(plot && plot.querySelector('.main-svg') && plot.data
            && document.querySelector('#overview-kpi-spend')
            && document.querySelector('#overview-movers table, #overview-movers .empty-state'));
}"""


def ready(page) -> None:
    page.wait_for_function(READY, timeout=15_000)


def text(page, name: str) -> str:
    return page.locator(f"#overview-{name}").inner_text()


def month_start(when: datetime) -> datetime:
    return when.replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def test_overview_tiles_are_the_marts(ledger_server, page) -> None:
    st = ledger_server.storage
    total = st.scalar("select sum(total) from spend_totals")
    before = datetime.now(UTC)
    requests, failed = st.fetchall(
        "select count(*), count(*) filter (where failed) from mart_requests"
    )[0]
    util = st.scalar(
        "select sum(gpu_util_mean * gpu_covered_s) / sum(gpu_covered_s) from mart_gpu_hourly"
    )
    cost, accepted = st.fetchall(  # every task starts in the last 7 days
        "select sum(total_cost_configured), count(*) filter (where is_accepted) from task_outcomes"
    )[0]
    spans = st.scalar("select count(*) from spans")

    page.goto(ledger_server.url + "/")
    ready(page)
    # Month to date is the server's month at the moment it drew the tile, which the tile names:
    # the month of `before` or, if one began while the page loaded, of now.
    label = page.locator(".stat:has(#overview-kpi-mtd) .stat-label").inner_text()
    (month,) = {
        m for m in (month_start(before), month_start(datetime.now(UTC))) if f"({m:%B})" in label
    }
    mtd = st.scalar(
        "select coalesce(sum(total), 0) from spend_totals where hour >= $m", {"m": month}
    )
    assert page.title() == "InferLedger"
    assert text(page, "kpi-spend") == money(total)
    assert text(page, "kpi-mtd") == money(mtd)
    assert text(page, "kpi-requests") == number(requests)
    assert text(page, "kpi-failures") == f"{failed / requests:.1%}"
    assert text(page, "kpi-gpu") == f"{util:.1%}"
    assert text(page, "kpi-cpao") == money(cost / accepted, 4)  # as on Unit economics
    assert text(page, "kpi-budget") == "No budget set"
    assert re.fullmatch(r"\d+ ms / \d+ ms", text(page, "kpi-ttft"))
    assert re.fullmatch(r"[\d.]+ (ms|s) / [\d.]+ (ms|s)", text(page, "kpi-e2e"))
    forecast = float(text(page, "kpi-forecast").strip("$").replace(",", ""))
    assert forecast >= mtd  # month to date plus a non-negative run rate
    assert "last 7 days" in page.locator("#overview-method").text_content()
    spend, reqs, ttft = page.evaluate(
        "() => document.querySelector('#overview-trend .js-plotly-plot').data"
        ".map(t => Array.from(t.y))"
    )
    assert sum(spend) == pytest.approx(total, rel=1e-9)
    assert sum(reqs) == requests
    assert any(v is not None and v > 0 for v in ttft)
    assert page.locator("#overview-movers tbody tr").count() > 0
    assert text(page, "data-spans") == f"{spans:,}"
    # the same number on the Unit economics page (the navigation keeps the query string)
    shown = text(page, "kpi-cpao")
    page.locator(".nav-link", has_text="Unit economics").click()
    expect(page.locator("#economics-cost-per-accepted")).to_have_text(shown)


def team_spend(storage, team: str, policy: str) -> float:
    return storage.scalar(
        "select sum(cost) from spend_hourly where idle_policy = $p and team = $t",
        {"p": policy, "t": team},
    )


def test_the_url_sets_the_numbers(ledger_server, page) -> None:
    st = ledger_server.storage
    page.goto(ledger_server.url + "/?range=7d&team=finance-ops&idle=usage")
    ready(page)
    assert text(page, "kpi-spend") == money(team_spend(st, "finance-ops", "usage"))
    assert "shared by usage" in text(page, "subtitle")
    requests = st.scalar("select count(*) from mart_requests where team = 'finance-ops'")
    assert text(page, "kpi-requests") == number(requests)


def test_a_filter_change_rewrites_the_url_and_the_numbers(ledger_server, page) -> None:
    st = ledger_server.storage
    page.goto(ledger_server.url + "/?range=7d&team=finance-ops")
    ready(page)
    assert text(page, "kpi-spend") == money(team_spend(st, "finance-ops", "configured"))
    page.locator("#filter-team").click()
    page.get_by_role("option", name="platform", exact=True).click()
    page.wait_for_function("() => location.search.includes('team=platform')")
    expected = team_spend(st, "platform", "configured")
    expect(page.locator("#overview-kpi-spend")).to_have_text(money(expected))
    page.wait_for_function(
        "v => { const d = document.querySelector('#overview-trend .js-plotly-plot')?.data;"
        " const y = d && d[0] && d[0].y;"
        " return !!y && Math.abs(Array.from(y).reduce((a, b) => a + b, 0) - v) < 1e-6; }",
        arg=expected,
    )


def test_top_movers_compare_with_the_previous_period_and_export(ledger_server, page) -> None:
    st = ledger_server.storage
    last = st.scalar("select max(hour) from mart_spend_hourly")
    start, end = last - timedelta(hours=1), last + timedelta(hours=1)
    before = start - timedelta(hours=2)
    rows = st.fetchall(
        """select
               coalesce(route, case when stage = 'idle' and app is null then '(idle)'
                                    else '(none)' end) as key,
               coalesce(sum(cost) filter (where hour >= $s), 0) as now,
               coalesce(sum(cost) filter (where hour < $s), 0) as before
           from spend_hourly
           where idle_policy = 'configured' and hour >= $b and hour < $e
           group by key order by abs(now - before) desc""",
        {"s": start, "b": before, "e": end},
    )
    query = urlencode({"range": "custom", "start": start.isoformat(), "end": end.isoformat()})
    page.goto(f"{ledger_server.url}/?{query}")
    ready(page)
    page.get_by_label("Route", exact=True).check()
    expect(page.locator("#overview-movers-note")).to_contain_text(f"{before:%Y-%m-%d %H:%M}")
    table = page.locator("#overview-movers tbody tr")
    expect(table.first).to_be_visible()
    shown = {
        r.locator("th").inner_text(): [c.inner_text() for c in r.locator("td").all()]
        for r in table.all()
    }
    for route, now, was in rows:
        assert shown[route][0] == money(was) and shown[route][1] == money(now)
        assert shown[route][5]  # a reason
    assert list(shown) == [key for key, _, _ in rows]  # the largest change first

    with page.expect_download() as info:
        page.locator("#overview-movers-csv-button").click()
    exported = list(csv.DictReader(io.StringIO(Path(info.value.path()).read_text("utf-8"))))
    assert [r["key"] for r in exported] == list(shown)
    for r in exported:
        assert money(float(r["spend"])) == shown[r["key"]][1]
        assert r["reason"] == shown[r["key"]][5]
        parts = float(r["traffic"]) + float(r["unit_cost"]) + float(r["other"])
        assert parts == pytest.approx(float(r["change"]), abs=1e-9)
