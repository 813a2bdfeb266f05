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
#: The demo's deployments (docs/demo.md); the tests read them from the ledger, as the demo's
#: company may grow one (issue #10 plants an over-provisioned deployment).
DEMO_DEPLOYMENTS = {"llama-3.1-8b-h200", "llama-3.1-70b-fp8-h200"}


def ledger_deployments(storage) -> set[str]:
    """Every deployment with a scraped replica: what the deployment charts list."""
    found = {r[0] for r in storage.fetchall("select distinct deployment from deployment_replicas")}
    assert found >= DEMO_DEPLOYMENTS
    return found


def chart_data(page, graph_id: str, timeout_ms: int = 10_000) -> list[dict]:
    page.wait_for_function(
        "id => { const p = document.querySelector('#' + id + ' .js-plotly-plot');"
        " return p && p.data && p.data.length > 0; }",
        arg=graph_id,
        timeout=timeout_ms,
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
    all_deployments = ledger_deployments(ledger_server.storage)
    assert {r[0] for r in rows} == set(hit_rate) == all_deployments
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
    assert set(table["cells"][0]) == all_deployments
    assert {t["name"] for t in chart_data(page, "gpu-kv")} == all_deployments
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
    all_deployments = ledger_deployments(ledger_server.storage)
    note = page.locator("#gpu-deployment-scope")
    note.wait_for()
    page.wait_for_function(
        "() => document.getElementById('gpu-deployment-scope').textContent.includes('team=')"
    )
    assert "team=platform and app=internal-chat" in note.inner_text()
    # the deployment charts still show every deployment; the app chart honours the app filter
    (prefix,) = chart_data(page, "gpu-prefix")
    assert set(prefix["y"]) == all_deployments
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
    # the file opens with "# ..." lines naming the range, filters and idle policy (app/exports.py)
    body = [line for line in target.read_text().splitlines(keepends=True) if line[:1] != "#"]
    rows = list(csv.DictReader(io.StringIO("".join(body))))

    all_deployments = ledger_deployments(ledger_server.storage)
    plotted = [(t["name"], x, y) for t in traces for x, y in zip(t["x"], t["y"], strict=True)]
    in_csv = [(r["deployment"], float(r["kv_usage"]), float(r["time_share"])) for r in rows]
    assert in_csv == plotted
    # each deployment's shares add up to all its covered time
    for deployment in all_deployments:
        total = sum(share for name, _, share in in_csv if name == deployment)
        assert math.isclose(total, 1.0, rel_tol=1e-9)


def test_replicas_over_time_and_findings(ledger_server, ledger_end, page) -> None:
    """The per-replica table (hottest first, beside its deployment's mean), the over-time
    panels and the right-sizing findings render with the ledger's numbers."""
    from ledger.efficiency import replica_table
    from ledger.queries import Filters
    from ledger.rightsizing import rightsizing_findings
    from models.rightsizing import share_text

    start, end, query = whole_days(ledger_end)
    page.goto(ledger_server.url + "/gpu" + query)
    filters = Filters(start=start, end=end)
    all_deployments = ledger_deployments(ledger_server.storage)
    n_replicas = ledger_server.storage.scalar("select count(*) from deployment_replicas")

    # the page now draws 12 cards: on a busy 2-core CI box the last ones take over 10 s
    (table,) = chart_data(page, "gpu-replicas", 30_000)
    expected = replica_table(ledger_server.storage, filters).to_pylist()
    deployments, replicas, utils = table["cells"][0], table["cells"][1], table["cells"][2]
    assert replicas == [r["replica"] for r in expected] and len(replicas) == n_replicas
    assert set(deployments) == all_deployments
    for shown, row in zip(utils, expected, strict=True):
        assert math.isclose(shown, row["utilization"], rel_tol=1e-12)
        assert 0 <= shown <= 1
    # within each deployment the hottest replica comes first, above its deployment's mean
    first_of = {}
    for row in expected:
        first_of.setdefault(row["deployment"], row)
    for row in first_of.values():
        assert row["utilization"] >= row["deployment_mean"] > 0

    # over time: three panels, one solid line per deployment (replicas in the legend only)
    traces = chart_data(page, "gpu-over-time", 30_000)
    assert len(traces) == 3 * (len(all_deployments) + n_replicas)  # 3 panels
    kv = [t for t in traces if t["name"] in all_deployments and t["y"] and t["y"][0] is not None]
    assert kv and all(0 <= v <= 1 for t in kv[:2] for v in t["y"] if v is not None)
    assert len(kv[0]["x"]) > 50  # 2.4 h of scrapes at 1-minute windows
    note = page.locator("#gpu-over-time-note").inner_text()
    assert "One point per 1 min window" in note

    # findings: one sentence per deployment, the same as the ledger function's, with numbers
    items = page.locator("#gpu-findings-list li")
    items.first.wait_for(timeout=30_000)
    findings = rightsizing_findings(ledger_server.storage, filters).to_pylist()
    assert items.all_inner_texts() == [f["message"] for f in findings]
    assert {f["deployment"] for f in findings} == all_deployments
    (finding_table,) = chart_data(page, "gpu-findings", 30_000)
    assert finding_table["cells"][0] == [f["deployment"] for f in findings]
    for f in findings:
        assert 0 <= f["idle_share"] <= 1 and f["replicas_held"] >= 1
        assert f"{share_text(f['idle_share'])} idle" in f["message"]
