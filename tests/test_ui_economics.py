"""The Unit economics page in a real headless Chromium against a real server on the demo ledger:
it loads without console errors, its charts show the demo's numbers, those numbers are the
views' (outcome_economics), and a chart's CSV is exactly what it plots."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from playwright.sync_api import expect

from app.components import money
from tests.conftest import choose, export_rows, whole_days

pytestmark = pytest.mark.browser

CHART_DATA_JS = """id => {
    const plot = document.querySelector('#' + id + ' .js-plotly-plot');
    return plot && plot.data ? plot.data.map(t => ({name: t.name, x: t.x, y: t.y})) : null;
}"""


def chart_data(page, graph_id: str) -> list[dict]:
    """The traces a chart plots, once it has some (fails on an empty state)."""
    page.wait_for_function(
        "id => { const p = document.querySelector('#' + id + ' .js-plotly-plot');"
        " return p && p.data && p.data.length > 0; }",
        arg=graph_id,
        timeout=10_000,
    )
    assert page.locator(f"#{graph_id}-empty").inner_text() == ""
    return page.evaluate(CHART_DATA_JS, graph_id)


def download_csv(page, graph_id: str, tmp_path: Path) -> list[dict[str, str]]:
    with page.expect_download(timeout=10_000) as info:
        page.click(f"#{graph_id}-csv-button")
    target = tmp_path / info.value.suggested_filename
    info.value.save_as(target)
    return export_rows(target.read_text())


def test_cost_per_accepted_outcome_matches_outcome_economics(
    ledger_server, ledger_end, page
) -> None:
    # whole days around the ledger's pinned end: the page and the views select the same tasks
    first, stop, query = whole_days(ledger_end)
    start, end = first.date(), stop.date()
    page.goto(ledger_server.url + "/economics" + query)
    (trace,) = chart_data(page, "economics-by-workflow")
    shown = dict(zip(trace["y"], trace["x"], strict=True))

    rows = ledger_server.storage.fetchall(
        "select workflow, sum(total_cost_configured) / sum(accepted_outcomes) "
        "from outcome_economics where day >= ? and day < ? and workflow is not null "
        "group by workflow",
        [start, end],
    )
    expected = dict(rows)
    assert set(shown) == set(expected) and len(expected) >= 4  # the demo's workflows
    for workflow, value in expected.items():
        assert math.isclose(shown[workflow], value, rel_tol=1e-9), workflow

    # the headline tile: all tasks' cost per accepted outcome, in the page's money format
    total = ledger_server.storage.scalar(
        "select sum(total_cost_configured) / sum(accepted_outcomes) from outcome_economics "
        "where day >= ? and day < ?",
        [start, end],
    )
    page.wait_for_function(
        "t => document.getElementById('economics-cost-per-accepted')?.textContent === t",
        arg=money(total, 4),
        timeout=10_000,
    )

    # the other charts have the demo's data too; the outcome mix counts every task
    mix = chart_data(page, "economics-outcomes")
    tasks = ledger_server.storage.scalar(
        "select sum(tasks) from outcome_economics where day >= ? and day < ?", [start, end]
    )
    assert sum(v for t in mix for v in t["x"]) == tasks
    route_bars = chart_data(page, "economics-by-route")[0]
    assert "/answer" in route_bars["y"]
    waste = chart_data(page, "economics-waste")
    assert sum(v for t in waste for v in t["x"]) > 0
    chart_data(page, "economics-overheads")
    # the demo's single day has no week before it: no finding, and the page says so
    page.wait_for_selector("#economics-findings >> text=No false economies found in")


def test_csv_is_the_charted_numbers(ledger_server, ledger_end, page, tmp_path: Path) -> None:
    _, _, query = whole_days(ledger_end)
    page.goto(ledger_server.url + "/economics" + query + "&app=support-assistant")
    (trace,) = chart_data(page, "economics-by-route")
    assert sorted(trace["y"]) == ["/answer", "/summarize"]  # the app filter applies

    rows = download_csv(page, "economics-by-route", tmp_path)
    assert [r["key"] for r in rows] == trace["y"]
    assert [float(r["cost_per_accepted"]) for r in rows] == trace["x"]
    assert {"tasks", "accepted_outcomes", "total_cost", "waste_cost"} <= set(rows[0])


# ------------------------------------------------------------------ models card's workflow
def workflow_shown(page) -> str:
    return page.locator("#economics-workflow-value").inner_text()


def test_the_models_cards_workflow_rides_in_the_url(ledger_server, ledger_end, page) -> None:
    _, _, query = whole_days(ledger_end)
    page.goto(ledger_server.url + "/economics" + query)
    page.wait_for_selector("#economics-models-table")
    busiest = workflow_shown(page)
    assert busiest and "models_of" not in page.url  # the page's own default stays out
    choose(page, "economics-workflow", "extract-invoice")
    assert busiest != "extract-invoice"
    page.wait_for_function("() => location.search.includes('models_of=extract-invoice')")
    assert "range=custom" in page.url  # the filters are kept beside it
    # a reload (or the copied link) shows the same workflow and its models
    page.reload()
    page.wait_for_selector("#economics-models-table")
    expect(page.locator("#economics-workflow-value")).to_have_text("extract-invoice")
    assert page.locator("#economics-workflow-note").inner_text() == ""
    models = ledger_server.storage.scalar(  # the range holds the whole demo ledger
        "select count(distinct coalesce(first_model, '')) from task_outcomes "
        "where workflow = 'extract-invoice'"
    )
    expect(page.locator("#economics-models-table tbody tr")).to_have_count(models)

    # a workflow the range does not hold: the busiest instead, said plainly; no error
    page.goto(ledger_server.url + "/economics" + query + "&models_of=no-such-flow")
    page.wait_for_selector("#economics-models-table")
    expect(page.locator("#economics-workflow-value")).to_have_text(busiest)
    expect(page.locator("#economics-workflow-note")).to_have_text(
        f"Workflow 'no-such-flow' has no tasks in this range: showing {busiest}."
    )
    page.wait_for_timeout(500)
    assert "models_of=no-such-flow" in page.url  # the link still says what it asked for
    assert page.locator("#filter-problems").inner_text() == ""
    # picking one replaces it
    choose(page, "economics-workflow", "chat")
    page.wait_for_function("() => location.search.includes('models_of=chat')")
    expect(page.locator("#economics-workflow-note")).to_have_text("")
