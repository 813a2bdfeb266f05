"""The Spend page in a real headless Chromium against a real server on the demo ledger: its
numbers are the marts', filters and the URL drive it both ways, the CSV is the chart's data
and names its range, filters and policy (viewers download it too), the treemap drills down to
the request explorer, each team's usage share of idle shows whatever the policy, the
breakdown dimension survives a reload, and a drag on the time axis narrows the range."""

from __future__ import annotations

import csv
import io
import re
import shutil
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest
from playwright.sync_api import expect

from app.components import money
from app.exports import csv_name, header_lines
from ledger import users
from ledger.queries import Filters
from tests.conftest import PASSWORDS, hours_up_to, sign_in, whole_days

pytestmark = pytest.mark.browser

READY = """() => {
  if (document.querySelector('[data-dash-is-loading="true"]')) return false;
  const plots = document.querySelectorAll('#content .js-plotly-plot');
  if (plots.length < 2) return false;
  for (const p of plots) { if (!p.querySelector('.main-svg') || !p.data) return false; }
  return true;
}"""
# Returns the drawn traces once there are some: a scheduled refresh redraws a chart, and a read
# between Plotly's purge and its redraw saw no traces (a CI flake), so wait and read are one step.
TRACES = """sel => {
  const data = document.querySelector(sel + ' .js-plotly-plot')?.data;
  if (!data || !data.length) return null;
  return Array.from(data).map(t => ({name: t.name, x: Array.from(t.x || []),
    y: Array.from(t.y || []), labels: Array.from(t.labels || []), ids: Array.from(t.ids || [])}));
}"""


@pytest.fixture
def still_server(demo_ledger, live_factory, tmp_path):
    """A server on a private copy of the demo ledger whose marts do not move under the test:
    no scheduled refresh, so the SQL a test expects and what the page draws read one ledger."""
    copy = tmp_path / "still.duckdb"
    shutil.copy(demo_ledger, copy)
    return live_factory(db=str(copy), ledger__refresh_interval_s=0)


def ready(page) -> None:
    page.wait_for_function(READY, timeout=15_000)


def traces(page, graph: str) -> list[dict]:
    return page.wait_for_function(TRACES, arg=f"#{graph}").json_value()


def sql_spend(storage, policy: str = "configured", **where: str) -> float:
    clauses = "".join(f" and {col} = ${col}" for col in where)
    return storage.scalar(
        f"select coalesce(sum(cost), 0) from spend_hourly where idle_policy = $policy{clauses}",
        {"policy": policy, **where},
    )


def click_node(page, label: str) -> None:
    """Click a treemap node by its label (its header strip, where the node itself is on top)."""
    node = page.locator("#spend-tree g.slice").filter(
        has=page.locator("text.slicetext", has_text=label)
    )
    node.first.locator("path.surface").click(position={"x": 30, "y": 8}, force=True)


def wait_kpi(page, expected: str) -> None:
    page.wait_for_function(
        "v => document.querySelector('#spend-kpi-spend')?.textContent === v", arg=expected
    )


def test_spend_numbers_are_the_marts(ledger_server, page) -> None:
    st = ledger_server.storage
    total = st.scalar("select sum(total) from spend_totals")
    unshared = st.scalar(
        "select sum(cost) from spend_hourly "
        "where idle_policy = 'configured' and stage = 'idle' and app is null"
    )
    teams = {r[0] for r in st.fetchall("select distinct team from mart_requests")}
    page.goto(ledger_server.url + "/spend")
    ready(page)
    assert page.title() == "Spend · InferLedger"
    assert page.locator("#spend-kpi-spend").inner_text() == money(total)
    assert page.locator("#spend-kpi-unshared").inner_text() == money(unshared)
    assert f"Unshared idle: {money(unshared)}" in page.locator("#spend-idle-line").inner_text()
    area = traces(page, "spend-over-time")
    assert {t["name"] for t in area} == teams | {"(idle)"}
    assert sum(sum(t["y"]) for t in area) == pytest.approx(total, rel=1e-9)
    (tree,) = traces(page, "spend-tree")
    assert {"finance-ops", "(idle)"} <= set(tree["labels"])
    # the same number on the Overview, reached through the navigation (it keeps the query)
    page.locator(".nav-link", has_text="Overview").click()
    page.wait_for_selector("#overview-kpi-spend")
    assert page.locator("#overview-kpi-spend").inner_text() == money(total)


def test_a_team_filter_narrows_the_chart_and_writes_the_url(ledger_server, page) -> None:
    st = ledger_server.storage
    page.goto(ledger_server.url + "/spend")
    ready(page)
    page.locator("#filter-team").click()
    page.get_by_role("option", name="platform", exact=True).click()
    page.wait_for_function("() => location.search.includes('team=platform')")
    wait_kpi(page, money(sql_spend(st, team="platform")))
    page.wait_for_function(
        """() => { const d = document.querySelector('#spend-over-time .js-plotly-plot')?.data;
                   return d && d.length === 1 && d[0].name === 'platform'; }"""
    )
    (area,) = traces(page, "spend-over-time")
    assert sum(area["y"]) == pytest.approx(sql_spend(st, team="platform"), rel=1e-9)


def test_the_url_restores_the_numbers(ledger_server, page) -> None:
    st = ledger_server.storage
    page.goto(ledger_server.url + "/spend?range=7d&team=finance-ops&idle=usage")
    ready(page)
    expected = sql_spend(st, "usage", team="finance-ops")
    assert page.locator("#spend-kpi-spend").inner_text() == money(expected)
    assert expected != sql_spend(st, "configured", team="finance-ops")  # usage shares idle
    assert page.locator("#spend-idle-line").inner_text().startswith("Idle cost — Shared by usage")
    (area,) = traces(page, "spend-over-time")
    assert area["name"] == "finance-ops" and sum(area["y"]) == pytest.approx(expected, rel=1e-9)


def test_the_url_restores_the_filter_bar(ledger_server, page) -> None:
    page.goto(ledger_server.url + "/spend?range=24h&team=finance-ops&idle=usage")
    ready(page)
    shown = (
        page.locator("#filter-range-value").inner_text(),
        page.locator("#filter-team-value").inner_text(),
        page.locator("#filter-idle-value").inner_text(),
    )
    # Dash fetches the shell's layout from /_dash-layout, whose request has no query string:
    # app/shell.py must read the page's query from the Referer there (see the lead's notes).
    assert shown == ("Last 24 hours", "finance-ops", "Shared by usage")
    assert "range=24h" in page.url and "team=finance-ops" in page.url  # not rewritten


def test_the_csv_is_the_charts_data(ledger_server, ledger_end, page) -> None:
    # The 24 hours up to the ledger's pinned end, as a custom range: "Last 24 hours" would move
    # by an hour if one ended between drawing the chart and exporting its CSV.
    _, _, query = hours_up_to(ledger_end, 24)
    page.goto(ledger_server.url + "/spend" + query)
    ready(page)
    page.get_by_label("App", exact=True).check()
    page.wait_for_function(
        """() => (document.querySelector('#spend-over-time .js-plotly-plot')?.data || [])
                   .some(t => t.name === 'document-extraction')"""
    )
    ready(page)
    shown = {t["name"]: t for t in traces(page, "spend-over-time")}
    with page.expect_download() as info:
        page.locator("#spend-over-time-csv-button").click()
    download = info.value
    start, stop, _ = hours_up_to(ledger_end, 24)
    assert download.suggested_filename == (
        f"inferledger-spend-by-app_{start:%Y-%m-%dT%H%M}_{stop:%Y-%m-%dT%H%M}_configured.csv"
    )
    assert "by=app" in page.url  # the breakdown went into the URL
    text = Path(download.path()).read_text("utf-8")
    assert text.splitlines()[:4] == header_lines("spend-by-app", Filters(start, stop))[:4]
    rows = list(csv.DictReader(line for line in io.StringIO(text) if not line.startswith("#")))
    assert set(rows[0]) == {"bucket", "key", "cost", "requests"}
    assert {r["key"] for r in rows} == set(shown)
    assert len(rows) == 24 * len(shown)  # every hour of the range, for every key
    for key, trace in shown.items():
        mine = [r for r in rows if r["key"] == key]
        assert [float(r["cost"]) for r in mine] == trace["y"]
        assert [datetime.fromisoformat(r["bucket"]) for r in mine] == [
            datetime.fromisoformat(x) for x in trace["x"]
        ]


def biggest(storage, level: str, **where: str) -> str:
    """The `level` (team, app or route) with the most attributed spend under `where`: the
    demo's mix moves with the day of the week, and a team's node can be a sliver too narrow to
    click (finance-ops was 9 px wide on a Monday)."""
    clauses = "".join(f" and {col} = ${col}" for col in where)
    return storage.scalar(
        f"select {level} from spend_hourly where idle_policy = 'configured'"
        f" and stage <> 'idle' and {level} is not null{clauses}"
        f" group by {level} order by sum(cost) desc limit 1",
        where,
    )


def test_drill_down_from_team_to_app_to_route_reaches_the_requests(ledger_server, page) -> None:
    st = ledger_server.storage
    team = biggest(st, "team")
    app = biggest(st, "app", team=team)
    route = biggest(st, "route", team=team, app=app)
    others = {r[0] for r in st.fetchall("select distinct team from mart_requests")} - {team}
    page.goto(ledger_server.url + "/spend")
    ready(page)
    click_node(page, team)
    page.wait_for_function("t => location.search.includes('team=' + t)", arg=team)
    wait_kpi(page, money(sql_spend(st, team=team)))
    expect(page.locator("#filter-team-value")).to_have_text(team)
    page.wait_for_function(
        "() => { const d = document.querySelector('#spend-tree .js-plotly-plot')?.data;"
        " return !!(d && d[0] && d[0].labels) && !Array.from(d[0].labels).includes('(idle)'); }"
    )
    (tree,) = traces(page, "spend-tree")
    assert {team, app, route} <= set(tree["labels"])
    assert not others & set(tree["labels"])  # the other teams are filtered out
    ready(page)
    click_node(page, app)
    page.wait_for_function("a => location.search.includes('app=' + a)", arg=app)
    expect(page.locator("#spend-crumbs")).to_contain_text(f"app {app}")
    ready(page)
    click_node(page, route)
    page.wait_for_function(
        "r => location.search.includes('route=' + encodeURIComponent(r))", arg=route
    )
    wait_kpi(page, money(sql_spend(st, team=team, app=app, route=route)))
    expect(page.locator("#spend-crumbs")).to_contain_text(f"route {route}")
    expect(page.locator("#spend-requests-link")).to_have_attribute(
        "href", "/requests?" + urlencode({"range": "7d", "team": team, "app": app, "route": route})
    )
    page.locator("#spend-requests-link").click()
    page.wait_for_url("**/requests?**")
    query = parse_qs(urlsplit(page.url).query)
    assert (query["team"], query["app"], query["route"]) == ([team], [app], [route])


def test_up_one_level_widens_the_drill(ledger_server, page) -> None:
    page.goto(ledger_server.url + "/spend?range=7d&team=finance-ops&app=document-extraction")
    ready(page)
    page.locator("#spend-up").click()
    page.wait_for_function("() => !location.search.includes('app=')")
    assert "team=finance-ops" in page.url
    page.wait_for_function(
        "() => document.querySelector('#filter-app-value').textContent === 'All'"
    )


def test_the_breakdown_survives_reload_and_navigation(ledger_server, page) -> None:
    st = ledger_server.storage
    routes = {r[0] or "(none)" for r in st.fetchall("select distinct route from mart_requests")}
    page.goto(ledger_server.url + "/spend?range=7d&team=finance-ops")
    ready(page)
    page.get_by_label("Route", exact=True).check()
    page.wait_for_function("() => location.search.includes('by=route')")
    assert "team=finance-ops" in page.url  # the filters stay
    page.reload()
    ready(page)
    expect(page.get_by_label("Route", exact=True)).to_be_checked()
    names = {t["name"] for t in traces(page, "spend-over-time")}
    assert names and names <= routes | {"(idle)", "(other)"}
    # a filter change keeps the choice; so do the navigation links
    page.locator("#filter-team").click()
    page.get_by_role("option", name="platform", exact=True).click()
    page.wait_for_function("() => location.search.includes('team=platform')")
    assert "by=route" in page.url
    page.locator(".nav-link", has_text="Latency").click()
    page.wait_for_url("**/latency?**")
    assert "by=route" in page.url
    page.locator(".nav-link", has_text="Spend").click()
    page.wait_for_selector("#spend-dim")
    expect(page.get_by_label("Route", exact=True)).to_be_checked()
    # the default leaves the URL; a value no page offers falls back to it silently
    page.get_by_label("Team", exact=True).check()
    page.wait_for_function("() => !location.search.includes('by=')")
    page.goto(ledger_server.url + "/spend?by=workflow")
    ready(page)
    expect(page.get_by_label("Team", exact=True)).to_be_checked()
    assert page.locator("#filter-problems").inner_text() == ""


def _grid_rows(page) -> list[dict[str, str]]:
    """The grid's rows as shown (formatted text), in display order."""
    return page.evaluate(
        """() => Array.from(document.querySelectorAll('#spend-teams .ag-center-cols-container'
                 + ' .ag-row')).sort((a, b) => a.getAttribute('row-index')
                 - b.getAttribute('row-index')).map(row => Object.fromEntries(
                 Array.from(row.querySelectorAll('.ag-cell')).map(
                   c => [c.getAttribute('col-id'), c.textContent])))"""
    )


def _grid_data(page) -> list[dict]:
    """The grid's rows as data (unformatted numbers), in display order."""
    return page.evaluate(
        """async () => { const api = await dash_ag_grid.getApiAsync('spend-teams');
             const rows = []; api.forEachNodeAfterFilterAndSort(n => rows.push(n.data));
             return rows; }"""
    )


def _dollars(text: str) -> float:
    return float(text.replace("$", "").replace(",", ""))


def test_each_teams_idle_share_shows_whatever_the_policy(still_server, ledger_end, page) -> None:
    ledger_server = still_server
    st = ledger_server.storage
    start, stop, query = whole_days(ledger_end)
    window = {"s": start, "e": stop}
    usage = dict(
        st.fetchall(
            "select coalesce(team, '(idle)'), sum(cost) from spend_hourly where idle_policy ="
            " 'usage' and stage = 'idle' and hour >= $s and hour < $e group by all",
            window,
        )
    )
    idle = st.scalar(
        "select sum(cost) from spend_hourly where idle_policy = 'separate' and stage = 'idle'"
        " and hour >= $s and hour < $e",
        window,
    )
    teams = {t for t in usage if t != "(idle)"}
    assert teams and idle > 0 and sum(usage.values()) == pytest.approx(idle, rel=1e-9)
    page.goto(ledger_server.url + "/spend" + query + "&idle=separate")
    ready(page)
    wait_rows = "() => document.querySelectorAll('#spend-teams .ag-row').length > 1"
    page.wait_for_function(wait_rows)
    expect(page.locator("#spend-teams-note")).to_contain_text("Separate line")
    data = {r["team"]: r for r in _grid_data(page)}
    for team in teams:
        # under `separate` no team is charged idle, yet each sees its usage share
        assert data[team]["idle_cost"] == 0
        assert data[team]["usage_idle"] == pytest.approx(usage[team], rel=1e-9)
        assert data[team]["usage_idle_share"] == pytest.approx(usage[team] / idle, rel=1e-9)
    assert data["(idle)"]["cost"] == pytest.approx(idle, rel=1e-9)
    # what is shown is the data, formatted: dollars and cents, a share in per cent
    shown = {r["team"]: r for r in _grid_rows(page)}
    for team, row in data.items():
        assert _dollars(shown[team]["usage_idle"]) == pytest.approx(row["usage_idle"], abs=0.005)
        assert shown[team]["usage_idle_share"].endswith("%")
    # rows come biggest spend first; a first click on a header sorts it descending
    costs = [r["cost"] for r in _grid_data(page)]
    assert costs == sorted(costs, reverse=True)
    page.locator("#spend-teams .ag-header-cell[col-id=requests]").click()
    expect(page.locator("#spend-teams .ag-header-cell[col-id=requests]")).to_have_attribute(
        "aria-sort", "descending"
    )
    counts = [r["requests"] for r in _grid_data(page)]
    assert counts == sorted(counts, reverse=True) and counts[0] > counts[-1]
    # the table fits the card: every column, the spend included, is on screen
    grid = page.locator("#spend-teams").bounding_box()
    for col in ("cost", "usage_idle", "requests"):
        cell = page.locator(f"#spend-teams .ag-header-cell[col-id={col}]").bounding_box()
        assert grid and cell and cell["x"] + cell["width"] <= grid["x"] + grid["width"] + 1
    # under usage sharing each team is charged exactly its usage share
    page.goto(ledger_server.url + "/spend" + query + "&idle=usage")
    ready(page)
    expect(page.locator("#spend-teams-note")).to_contain_text("Shared by usage")
    page.wait_for_function(wait_rows)
    data = {r["team"]: r for r in _grid_data(page)}
    for team in teams:
        assert data[team]["idle_cost"] == pytest.approx(usage[team], rel=1e-9), data


def test_a_viewer_downloads_csv_naming_range_filters_and_policy(
    demo_ledger, live_factory, tmp_path, ledger_end, tab
) -> None:
    page, _console = tab
    copy = tmp_path / "viewer.duckdb"
    shutil.copy(demo_ledger, copy)
    live = live_factory(db=str(copy), auth__enabled=True, ledger__refresh_interval_s=0)
    users.add_user(live.service.storage, "vic", "viewer", PASSWORDS["vic"], by="test")
    start, stop, query = hours_up_to(ledger_end, 24)
    path = "/spend" + query + "&team=finance-ops&idle=usage"
    sign_in(page, live.url, "vic", PASSWORDS["vic"], path)
    page.wait_for_url("**/spend?**")
    ready(page)
    filters = Filters(start, stop, team="finance-ops", policy="usage")
    for button, name in (
        ("#spend-tree-csv-button", "spend-tree"),  # components.chart's CSV
        ("#spend-over-time-csv-button", "spend-by-team"),  # the page's own
        ("#spend-teams-csv-button", "spend-idle-by-team"),
    ):
        with page.expect_download() as info:
            page.locator(button).click()
        download = info.value
        assert download.suggested_filename == csv_name(name, filters)
        assert download.suggested_filename.endswith("_team-finance-ops_usage.csv")
        assert f"_{start:%Y-%m-%dT%H%M}_{stop:%Y-%m-%dT%H%M}_" in download.suggested_filename
        lines = Path(download.path()).read_text("utf-8").splitlines()
        assert lines[1] == f"# range: {start:%Y-%m-%d %H:%M} to {stop:%Y-%m-%d %H:%M} UTC"
        assert lines[2] == "# filters: team=finance-ops"
        assert lines[3].startswith("# idle policy: usage (Shared by usage")
        rows = int(lines[4].removeprefix("# rows: "))
        assert rows > 0 and len(lines) == 5 + 1 + rows
        if name == "spend-idle-by-team":
            # a team's share is of all idle, not only of the (none) idle filed under the team
            (row,) = csv.DictReader(lines[5:])
            assert row["team"] == "finance-ops" and 0 < float(row["usage_idle_share"]) < 1
    # the request explorer stays analyst-only
    resp = page.request.get(live.url + "/requests")
    assert resp.status == 403


def test_dragging_across_the_time_axis_narrows_the_range(still_server, ledger_end, page) -> None:
    ledger_server = still_server
    st = ledger_server.storage
    _, _, query = whole_days(ledger_end)
    page.goto(ledger_server.url + "/spend" + query + "&team=finance-ops")
    ready(page)
    drag = page.locator("#spend-over-time .nsewdrag").first.bounding_box()
    assert drag
    y = drag["y"] + drag["height"] / 2
    page.mouse.move(drag["x"] + drag["width"] * 0.70, y)
    page.mouse.down()
    page.mouse.move(drag["x"] + drag["width"] * 0.80, y, steps=5)
    page.mouse.move(drag["x"] + drag["width"] * 0.95, y, steps=5)
    page.mouse.up()
    page.wait_for_function("() => location.search.includes('T')")  # datetimes, not dates
    q = parse_qs(urlsplit(page.url).query)
    assert q["range"] == ["custom"] and q["team"] == ["finance-ops"]
    start = datetime.fromisoformat(q["start"][0]).replace(tzinfo=UTC)
    end = datetime.fromisoformat(q["end"][0]).replace(tzinfo=UTC)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d", q["start"][0])
    first, last = whole_days(ledger_end)[:2]
    assert first < start < end <= last and end - start < last - first
    expected = st.scalar(
        "select coalesce(sum(cost), 0) from spend_hourly where idle_policy = 'configured'"
        " and team = 'finance-ops' and hour >= $s and hour < $e",
        {"s": start, "e": end},
    )
    wait_kpi(page, money(expected))
    expect(page.locator("#filter-range-value")).to_have_text("Custom…")
    # a double-click resets the axis, not the range: the URL is the state
    zoomed_url = page.url
    page.mouse.dblclick(drag["x"] + drag["width"] / 2, y)
    page.wait_for_timeout(500)
    assert page.url == zoomed_url
    # a filter change afterwards keeps the zoomed times
    page.locator("#filter-idle").click()
    page.get_by_role("option", name="Shared by usage").click()
    page.wait_for_function("() => location.search.includes('idle=usage')")
    q2 = parse_qs(urlsplit(page.url).query)
    assert (q2["start"], q2["end"]) == (q["start"], q["end"])
