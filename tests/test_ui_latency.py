"""The Latency & stages page in a real headless Chromium against a real server on the demo
ledger: it loads without console errors, its percentiles are the latency histograms' (the
latency_percentiles_over macro), the app filter changes the stage chart, and the CSV is exactly
what the chart plots."""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

import pytest

from ledger.queries import Filters, run
from tests.conftest import choose, whole_days

CHART_DATA_JS = """id => {
    const plot = document.querySelector('#' + id + ' .js-plotly-plot');
    return plot && plot.data ? plot.data.map(t => ({name: t.name, x: t.x, y: t.y})) : null;
}"""
E2E = "End to end (LLM call)"


def chart_data(page, graph_id: str) -> list[dict]:
    page.wait_for_function(
        "id => { const p = document.querySelector('#' + id + ' .js-plotly-plot');"
        " return p && p.data && p.data.length > 0; }",
        arg=graph_id,
        timeout=10_000,
    )
    assert page.locator(f"#{graph_id}-empty").inner_text() == ""
    return page.evaluate(CHART_DATA_JS, graph_id)


def stage_points(traces: list[dict]) -> dict[str, dict[tuple[str, str], float]]:
    """{'p95': {(route, stage label): seconds}} from the stage chart's traces."""
    return {t["name"]: dict(zip(zip(*t["y"], strict=True), t["x"], strict=True)) for t in traces}


@pytest.mark.browser
def test_stage_percentiles_match_the_histograms(ledger_server, ledger_end, page) -> None:
    start, end, query = whole_days(ledger_end)
    page.goto(ledger_server.url + "/latency" + query)
    points = stage_points(chart_data(page, "latency-stages"))
    assert set(points) == {"p50", "p95", "p99"}

    # /answer has one app and one environment in the demo: the macro's row is the route's
    (p50, p95, p99) = ledger_server.storage.fetchall(
        "select p50_s, p95_s, p99_s from latency_percentiles_over(?, ?) "
        "where app = 'support-assistant' and route = '/answer' and stage = 'e2e'",
        [start, end],
    )[0]
    assert math.isclose(points["p50"][("/answer", E2E)], p50, rel_tol=1e-12)
    assert math.isclose(points["p95"][("/answer", E2E)], p95, rel_tol=1e-12)
    assert math.isclose(points["p99"][("/answer", E2E)], p99, rel_tol=1e-12)
    assert p50 < p95 <= p99
    routes = {route for route, _ in points["p95"]}
    assert routes == {"/answer", "/summarize", "/extract", "/complete", "/chat"}

    # the objectives and the load picture have the demo's data too
    slo = chart_data(page, "latency-slo")
    objectives = ledger_server.storage.scalar(
        "select count(distinct (objective, route)) from slo_attainment_between(?, ?)",
        [start, end],
    )
    assert len(slo[0]["y"]) == objectives > 0
    load = chart_data(page, "latency-load")
    # one series per self-hosted deployment that served a measured request in the range
    served = ledger_server.storage.fetchall(
        "select distinct deployment from mart_requests where hour >= ? and hour < ? and "
        "hosting = 'self_hosted' and deployment is not null and not failed "
        "and isfinite(ttft_s) and ttft_s >= 0",
        [start, end],
    )
    assert {t["name"] for t in load} == {r[0] for r in served}
    assert {"llama-3.1-8b-h200", "llama-3.1-70b-fp8-h200"} <= {t["name"] for t in load}


@pytest.mark.browser
def test_app_filter_changes_the_stage_chart(ledger_server, ledger_end, page) -> None:
    _, _, query = whole_days(ledger_end)
    page.goto(ledger_server.url + "/latency" + query)
    before = stage_points(chart_data(page, "latency-stages"))["p95"]
    assert {route for route, _ in before} > {"/complete"}

    choose(page, "filter-app", "code-assistant")
    page.wait_for_url("**app=code-assistant**", timeout=10_000)
    # every percentile's trace redrawn for the filter (CI once read the chart between a redraw
    # of the first trace and the others: no 'p95' yet)
    page.wait_for_function(
        "id => { const p = document.querySelector('#' + id + ' .js-plotly-plot');"
        " const d = p && p.data;"
        " return d && d.length === 3 && d.every(t => t.y && t.y[0]"
        " && t.y[0].every(r => r === '/complete')); }",
        arg="latency-stages",
        timeout=10_000,
    )
    after = stage_points(chart_data(page, "latency-stages"))["p95"]
    assert {route for route, _ in after} == {"/complete"}
    assert after[("/complete", E2E)] == before[("/complete", E2E)]  # same requests, same p95
    # a team filter cannot apply to the histograms: the page says so
    choose(page, "filter-team", "developer-productivity")
    page.wait_for_selector("#latency-stages-scope >> text=team=developer-productivity")


@pytest.mark.browser
def test_csv_is_the_charted_numbers(ledger_server, ledger_end, page, tmp_path: Path) -> None:
    _, _, query = whole_days(ledger_end)
    page.goto(ledger_server.url + "/latency" + query)
    traces = chart_data(page, "latency-stages")
    with page.expect_download(timeout=10_000) as info:
        page.click("#latency-stages-csv-button")
    target = tmp_path / "stages.csv"
    info.value.save_as(target)
    # the file opens with "# ..." lines naming the range, filters and idle policy (app/exports.py)
    body = [line for line in target.read_text().splitlines(keepends=True) if line[:1] != "#"]
    rows = list(csv.DictReader(io.StringIO("".join(body))))

    routes, _labels = traces[0]["y"]
    assert [r["route"] for r in rows] == routes
    for trace in traces:
        column = f"{trace['name']}_s"
        assert [float(r[column]) for r in rows] == trace["x"], column


def test_stage_query_agrees_with_the_macro(ledger_server, ledger_end) -> None:
    """latency_stage_percentiles merges the histograms per route with the macro's rule: where
    a route has one app and one environment (the demo), every number is the macro's."""
    start, end, _ = whole_days(ledger_end)
    storage = ledger_server.storage
    ours = run(storage, "latency_stage_percentiles", Filters(start=start, end=end)).to_pylist()
    macro = {
        (r[0], r[1]): r[2:]
        for r in storage.fetchall(
            "select route, stage, count, mean_s, min_s, max_s, p50_s, p95_s, p99_s "
            "from latency_percentiles_over(?, ?)",
            [start, end],
        )
    }
    assert len(ours) == len(macro) > 20
    for row in ours:
        expected = macro[(row["route"], row["stage"])]
        got = (row[k] for k in ("count", "mean_s", "min_s", "max_s", "p50_s", "p95_s", "p99_s"))
        for a, b in zip(got, expected, strict=True):
            assert a == b or math.isclose(a, b, rel_tol=1e-12), (row["route"], row["stage"])
    # a model filter narrows it; the model's requests have no retrieval or tool stage
    one_model = run(
        storage,
        "latency_stage_percentiles",
        Filters(start=start, end=end, model="meta-llama/Llama-3.1-8B-Instruct"),
    ).to_pylist()
    stages = {r["stage"] for r in one_model}
    assert stages and not stages & {"retrieval", "tools"}
