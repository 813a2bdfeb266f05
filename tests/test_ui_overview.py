"""The Overview in a real headless Chromium against a real server on the demo ledger: every
tile is the marts' number, the filters and the URL drive it, the trend chart and the top movers
are drawn, and the movers' CSV is the table."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlencode

import pytest
from playwright.sync_api import expect

from app.components import money, number
from ledger import overview as ov
from ledger.queries import Filters, run
from tests.conftest import export_rows

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
    # attempts (traces with an LLM call) fail when their root span is an error (a guardrail
    # block: the call itself succeeded) or every call failed; tasks as overview_failures counts
    attempts, failed_attempts = st.fetchall(
        "with t as (select trace_id, bool_and(failed) as all_failed from mart_requests "
        "group by trace_id) select count(*), count(*) filter (where all_failed or trace_id in "
        "(select trace_id from spans where parent_span_id is null and status_code = 2)) from t"
    )[0]
    f = run(st, "overview_failures", Filters.last(7)).to_pylist()[0]
    assert failed_attempts > failed  # retried guardrail blocks count, not only failed calls
    assert text(page, "kpi-failures") == (
        f"{failed_attempts / attempts:.1%} / {f['failed_tasks'] / f['tasks']:.1%}"
    )
    assert text(page, "kpi-gpu") == f"{util:.1%}"
    assert text(page, "kpi-cpao") == money(cost / accepted, 4)  # as on Unit economics
    # the demo ships its budgets (models/data/demo-alerts.yaml): the tile names the most urgent
    # one covering the filters (the whole organisation here)
    tile = ov.budget_tile(st, Filters.last(7), datetime.now(UTC))
    label = page.locator(".stat:has(#overview-kpi-budget) .stat-label").inner_text()
    assert tile and label == f"Budget: {tile[0].budget.name}"
    assert re.fullmatch(r"\d+ ms / \d+ ms", text(page, "kpi-ttft"))
    assert re.fullmatch(r"[\d.]+ (ms|s) / [\d.]+ (ms|s)", text(page, "kpi-e2e"))
    forecast = float(text(page, "kpi-forecast").strip("$").replace(",", ""))
    assert forecast >= mtd  # month to date plus a non-negative run rate
    assert "last 7 days" in page.locator("#overview-method").text_content()
    # wait and read in one step: a scheduled refresh may redraw the chart between the two
    spend, reqs, ttft = page.wait_for_function(
        "() => { const d = document.querySelector('#overview-trend .js-plotly-plot')?.data;"
        " return d && d.length === 3 ? d.map(t => Array.from(t.y)) : null; }"
    ).json_value()
    assert sum(spend) == pytest.approx(total, rel=1e-9)
    assert sum(reqs) == requests
    assert any(v is not None and v > 0 for v in ttft)
    # the 7 days before the ledger's first hour hold nothing: no movers against an empty
    # baseline (issue #10: "traffic +309533 %"), but the reason
    expect(page.locator("#overview-movers-incomplete")).to_contain_text("data begins")
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
    exported = export_rows(Path(info.value.path()).read_text("utf-8"))
    assert [r["key"] for r in exported] == list(shown)
    for r in exported:
        assert money(float(r["spend"])) == shown[r["key"]][1]
        assert r["reason"] == shown[r["key"]][5]
        parts = float(r["traffic"]) + float(r["unit_cost"]) + float(r["other"])
        assert parts == pytest.approx(float(r["change"]), abs=1e-9)


# ------------------------------------------------------------------- partial scrapes (H1, #10)
_PERCENT = re.compile(r"(-?\d[\d,]*(?:\.\d+)?)\s?%")
_SETTLED = """() => !document.querySelector('[data-dash-is-loading="true"]')
  && !document.querySelector('._dash-loading')"""


def test_partial_scrapes_no_page_shows_a_share_above_100(live_factory, page, tmp_path) -> None:
    """A ledger with GPU metrics for the last 5 minutes of its 4 hours (issue #10: "usage share
    242 %", "busy 124.0 % of GPU time"): every page's text holds no percentage above 100, and
    the Overview says how much of the spend is estimated and how many requests are unpriced."""
    from inferledger.core.storage import Storage
    from inferledger.ledger_fixtures import PARTIAL_GPUS, partial_scrapes
    from ledger.allocation import HOUR_NS
    from ledger.marts import refresh
    from models.deployment_config import Deployment

    db = tmp_path / "partial.duckdb"
    now_ns = int(datetime.now(UTC).timestamp()) * 1_000_000_000
    with Storage(db, read_timeout_s=10).open() as st:
        # only the last 5 minutes scraped: busy time once read as a busy share of 320 %
        partial_scrapes(st, (now_ns // HOUR_NS - 4) * HOUR_NS, scraped_s=300)
        refresh(st)
    # the server rewrites configured deployments at start: give it the fixture's
    dep = Deployment("dep", model="m", gpu_type="H200", gpus_per_replica=PARTIAL_GPUS)
    live = live_factory(db=str(db), deployments=(dep,))
    assert live.storage.scalar("select count(*) from mart_requests where cost_basis = 'estimated'")
    seen = {}
    for path in ("/", "/spend", "/requests", "/gpu", "/latency", "/economics"):
        page.goto(live.url + path + "?range=24h")
        page.wait_for_selector("#content", timeout=15_000)
        page.wait_for_timeout(500)
        page.wait_for_function(_SETTLED, timeout=20_000)
        page.wait_for_timeout(1_000)
        page.wait_for_function(_SETTLED, timeout=20_000)
        # the text a reader sees, without the charts' axis ticks (an axis autoranges past 100)
        body = page.evaluate(
            """() => {
              const plots = [...document.querySelectorAll('.js-plotly-plot')];
              plots.forEach(p => { p.dataset.was = p.style.display; p.style.display = 'none'; });
              const text = document.body.innerText;
              plots.forEach(p => { p.style.display = p.dataset.was; });
              return text;
            }"""
        )
        values = [float(v.replace(",", "")) for v in _PERCENT.findall(body)]
        seen[path] = values
        over = [
            line
            for line in body.splitlines()
            if any(float(v.replace(",", "")) > 100 for v in _PERCENT.findall(line))
        ]
        assert not over, (path, over)
        # every page says the range is incomplete, names dep's stretch and links to it
        banner = page.locator("#coverage-banner")
        expect(banner).to_be_visible()
        expect(banner).to_contain_text("Data coverage")
        expect(banner).to_contain_text("$0.96 of the cost is estimated")
        expect(banner).to_contain_text("dep ")
        href = banner.locator("a").first.get_attribute("href")
        assert href.startswith("/gpu?range=custom&start="), href
        if path == "/spend":
            hint = page.locator("#spend-kpi-spend").locator("xpath=..").inner_text()
            assert "$0.96 of it estimated" in hint and "unpriced: 4 requests" in hint
        if path == "/requests":  # a self-hosted call never shows a bare $0: est. or unpriced
            expect(page.locator(".ag-row").first).to_be_visible()
            rows = page.locator(".ag-center-cols-container .ag-row").all_inner_texts()
            assert rows and all("est." in r or "unpriced" in r for r in rows), rows[:3]
    assert any(seen.values()), "no percentage on any page: the check checked nothing"
    page.goto(live.url + "/?range=24h")
    ready(page)
    spend_hint = page.locator("#overview-kpi-spend").locator("xpath=..").inner_text()
    # 4 h x 6 requests x 20 s x $0.002/s, none of it scraped
    assert "$0.96 of it estimated" in spend_hint and "unpriced: 4 requests" in spend_hint
    # the previous 24 h hold no data: top movers are flagged, not "+∞ %"
    expect(page.locator("#overview-movers-incomplete")).to_contain_text("data begins")
