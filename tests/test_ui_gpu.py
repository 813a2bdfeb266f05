"""The GPU & cache page in a real headless Chromium against a real server on the demo ledger:
it loads without console errors, its numbers are cache_efficiency's and cache_by_app's, a
filter the deployment marts cannot apply is named on the page, and a chart's CSV is exactly
what it plots."""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

import pytest

from tests.conftest import whole_days

pytestmark = pytest.mark.browser

CHART_DATA_JS = """id => {
    const plot = document.querySelector('#' + id + ' .js-plotly-plot');
    return plot && plot.data ? plot.data.map(t => ({
        name: t.name, type: t.type, x: t.x, y: t.y, customdata: t.customdata,
        cells: t.cells ? t.cells.values : null})) : null;
}"""
DEPLOYMENTS = {"llama-3.1-8b-h200", "llama-3.1-70b-fp8-h200"}


def chart_data(page, graph_id: str) -> list[dict]:
    page.wait_for_function(
        "id => { const p = document.querySelector('#' + id + ' .js-plotly-plot');"
        " return p && p.data && p.data.length > 0; }",
        arg=graph_id,
        timeout=10_000,
    )
    assert page.locator(f"#{graph_id}-empty").inner_text() == ""
    return page.evaluate(CHART_DATA_JS, graph_id)


def test_deployment_numbers_match_cache_efficiency(ledger_server, ledger_end, page) -> None:
    start, end, query = whole_days(ledger_end)
    page.goto(ledger_server.url + "/gpu" + query)
    (prefix,) = chart_data(page, "gpu-prefix")
    hit_rate = dict(zip(prefix["y"], prefix["x"], strict=True))
    saved = dict(zip(prefix["y"], (c[0] for c in prefix["customdata"]), strict=True))

    rows = ledger_server.storage.fetchall(
        "select deployment, sum(prefix_hits) / sum(prefix_queries), sum(prefill_cost_saved), "
        "sum(idle_cost) from cache_efficiency where hour >= ? and hour < ? group by deployment",
        [start, end],
    )
    assert {r[0] for r in rows} == set(hit_rate) == DEPLOYMENTS
    for deployment, expected_rate, expected_saved, _ in rows:
        assert math.isclose(hit_rate[deployment], expected_rate, rel_tol=1e-12)
        assert math.isclose(saved[deployment], expected_saved, rel_tol=1e-12)
        assert 0 < expected_rate < 1 and expected_saved > 0

    idle = {t["name"]: dict(zip(t["y"], t["x"], strict=True)) for t in chart_data(page, "gpu-idle")}
    idle_costs = idle["Idle (up, no request running)"]
    for deployment, *_, expected_idle in rows:
        assert math.isclose(idle_costs[deployment], expected_idle, rel_tol=1e-12)

    # the summary table, utilization, tokens, KV occupancy and unit costs all have data
    (table,) = chart_data(page, "gpu-summary")
    assert set(table["cells"][0]) == DEPLOYMENTS
    assert {t["name"] for t in chart_data(page, "gpu-kv")} == DEPLOYMENTS
    for graph in ("gpu-utilization", "gpu-tokens", "gpu-unit-cost"):
        traces = chart_data(page, graph)
        assert all(v is not None and v > 0 for t in traces for v in t["x"]), graph

    # the apps that share prefixes worst come first, as cache_by_app ranks them
    (apps,) = chart_data(page, "gpu-apps")
    ranked = ledger_server.storage.fetchall(
        "select concat(app, ' ', route) from cache_by_app_between(?, ?) "
        "order by poor_sharing_rank nulls last",
        [start, end],
    )
    assert apps["y"] == [r[0] for r in ranked]
    assert len(apps["y"]) == 5


def test_filters_the_marts_lack_are_named(ledger_server, ledger_end, page) -> None:
    _, _, query = whole_days(ledger_end)
    page.goto(ledger_server.url + "/gpu" + query + "&team=platform&app=internal-chat")
    note = page.locator("#gpu-deployment-scope")
    note.wait_for()
    page.wait_for_function(
        "() => document.getElementById('gpu-deployment-scope').textContent.includes('team=')"
    )
    assert "team=platform and app=internal-chat" in note.inner_text()
    # the deployment charts still show every deployment; the app chart honours the app filter
    (prefix,) = chart_data(page, "gpu-prefix")
    assert set(prefix["y"]) == DEPLOYMENTS
    (apps,) = chart_data(page, "gpu-apps")
    assert apps["y"] == ["internal-chat /chat"]
    assert "team=platform" in page.locator("#gpu-apps-scope").inner_text()


def test_csv_is_the_charted_numbers(ledger_server, ledger_end, page, tmp_path: Path) -> None:
    _, _, query = whole_days(ledger_end)
    page.goto(ledger_server.url + "/gpu" + query)
    traces = chart_data(page, "gpu-kv")
    with page.expect_download(timeout=10_000) as info:
        page.click("#gpu-kv-csv-button")
    target = tmp_path / "kv.csv"
    info.value.save_as(target)
    rows = list(csv.DictReader(io.StringIO(target.read_text())))

    plotted = [(t["name"], x, y) for t in traces for x, y in zip(t["x"], t["y"], strict=True)]
    in_csv = [(r["deployment"], float(r["kv_usage"]), float(r["time_share"])) for r in rows]
    assert in_csv == plotted
    # each deployment's shares add up to all its covered time
    for deployment in DEPLOYMENTS:
        total = sum(share for name, _, share in in_csv if name == deployment)
        assert math.isclose(total, 1.0, rel_tol=1e-9)
