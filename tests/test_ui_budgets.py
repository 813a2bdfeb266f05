"""Budgets in a real browser against a real server: an admin creates, edits and archives a
budget (a bad amount shows the validator's message and writes nothing); a viewer gets no
editing control and a replayed save answers 403 and writes nothing (while the same call from
an admin writes); the detail view draws actual spend, the forecast band and the limit; the
Overview's tile shows the budgets the filters fall under."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote

import pytest
from playwright.sync_api import expect

from app.components import amount
from ledger import api_tokens, budget_status, budgets
from ledger import overview as ov
from ledger.queries import Filters
from models.alert_config import DIMENSIONS, Budget
from tests.conftest import PASSWORDS, LiveService, choose, session_for, sign_in

pytestmark = pytest.mark.browser

# the detail chart's traces, waited for and read in one step (a tick may redraw it between)
TRACES = """() => {
  const d = document.querySelector('#budgets-detail-chart .js-plotly-plot')?.data;
  return d && d.length === 5
    ? d.map(t => ({name: t.name, x: Array.from(t.x || []), y: Array.from(t.y || [])}))
    : null;
}"""


def test_admin_creates_edits_and_archives_a_budget(secured: LiveService, tab: Any) -> None:
    storage = secured.service.storage
    page, _ = tab
    sign_in(page, secured.url, "ann", PASSWORDS["ann"], "/admin/budgets")
    page.wait_for_selector("#admin-budgets-name")
    page.fill("#admin-budgets-name", "search-monthly")
    page.fill("#admin-budgets-scope-team", "search")
    page.fill("#admin-budgets-amount", "500")
    page.fill("#admin-budgets-owner", "search-lead@example.com")
    page.fill("#admin-budgets-thresholds", "50,90,100")
    page.click("#admin-budgets-save")
    page.wait_for_selector("text=Created budget search-monthly")
    stored = budgets.get_budget(storage, "search-monthly")
    assert stored is not None and stored.scope == {"team": "search"} and stored.amount == 500
    assert stored.thresholds == (50, 90, 100) and stored.source == "ui"
    expect(page.locator("#admin-budgets-changes")).to_contain_text("added")

    # a bad amount: the validator's own message, nothing written
    page.fill("#admin-budgets-name", "broken")
    page.fill("#admin-budgets-amount", "-5")
    page.click("#admin-budgets-save")
    expect(page.locator("#admin-budgets-message .auth-error")).to_contain_text(
        "amount must be above 0"
    )
    assert budgets.get_budget(storage, "broken") is None
    assert budgets.budget_changes(storage).total == 1

    # the table shows it with a status and its owner
    page.goto(secured.url + "/budgets")
    row = page.locator("#budgets-grid .ag-row", has_text="search-monthly")
    expect(row.locator("[col-id=status]")).to_have_text("OK")
    expect(row).to_contain_text("search-lead@example.com")
    expect(row).to_contain_text("team=search")
    expect(page.locator("#budgets-sparklines .js-plotly-plot")).to_have_count(1)

    # edit: pick it, change the amount
    page.goto(secured.url + "/admin/budgets?budget=search-monthly")
    expect(page.locator("#admin-budgets-amount")).to_have_value("500")
    page.fill("#admin-budgets-amount", "800")
    page.click("#admin-budgets-save")
    page.wait_for_selector("text=Saved budget search-monthly")
    assert budgets.get_budget(storage, "search-monthly").amount == 800
    # archive it: it leaves the list, its history stays
    page.click("#admin-budgets-archive")
    page.wait_for_selector("text=Archived budget search-monthly")
    assert budgets.get_budget(storage, "search-monthly").archived_at is not None
    actions = [c.action for c in budgets.budget_changes(storage, name="search-monthly").changes]
    assert actions == ["archived", "changed", "added"]
    assert [c.changed_by for c in budgets.budget_changes(storage).changes] == ["ann"] * 3
    page.goto(secured.url + "/budgets")
    expect(page.locator("#budgets-empty")).to_contain_text("No budgets yet")


def test_a_viewer_cannot_edit_budgets(secured: LiveService, tab: Any) -> None:
    storage = secured.service.storage
    page, _ = tab
    sign_in(page, secured.url, "vic", PASSWORDS["vic"], "/budgets")
    page.wait_for_selector("#budgets-grid")
    expect(page.locator("#budgets-empty")).to_contain_text("No budgets yet")
    assert page.locator("#budgets-edit").count() == 0
    assert page.locator("a[href^='/admin/budgets']").count() == 0

    viewer, admin = session_for(secured, "vic"), session_for(secured, "ann")
    assert viewer.get(secured.url + "/admin/budgets", timeout=10).status_code == 403
    outputs = [d["output"] for d in viewer.get(secured.url + "/_dash-dependencies").json()]
    save = next(o for o in outputs if o.startswith("..admin-budgets-message.children.."))
    values = {
        "pick": None,
        "name": "forged",
        **{f"scope-{d}": None for d in DIMENSIONS},
        "period": "monthly",
        "week-start": 0,
        "reset-day": 1,
        "custom-start": None,
        "custom-end": None,
        "timezone": "UTC",
        "amount": 1,
        "currency": "USD",
        "thresholds": "50,80,100",
        "forecast-alert": ["on"],
        "idle-policy": None,
        "owner": "mallory",
        "channels": "",
        "note": None,
    }
    forged = {
        "output": save,
        "outputs": [
            {"id": "admin-budgets-message", "property": "children"},
            {"id": "admin-budgets-version", "property": "data"},
            {"id": "admin-budgets-offset", "property": "data"},
        ],
        "inputs": [{"id": "admin-budgets-save", "property": "n_clicks", "value": 1}],
        "changedPropIds": ["admin-budgets-save.n_clicks"],
        "state": [{"id": f"admin-budgets-{k}", "property": "value", "value": v}
                  for k, v in values.items()]
        + [{"id": "admin-budgets-version", "property": "data", "value": 0}],
    }  # fmt: skip
    answer = viewer.post(secured.url + "/_dash-update-component", json=forged, timeout=10)
    assert answer.status_code == 403
    assert budgets.get_budget(storage, "forged") is None
    assert budgets.budget_changes(storage).total == 0
    # the same call from an admin writes: the refusal above is the role, not a bad request
    answer = admin.post(secured.url + "/_dash-update-component", json=forged, timeout=10)
    assert answer.status_code == 200, answer.text
    assert budgets.get_budget(storage, "forged").owner == "mallory"


def test_detail_draws_actual_band_and_limit(ledger_server: LiveService, page: Any) -> None:
    storage = ledger_server.storage
    now = datetime.now(UTC)
    start = (now - timedelta(days=5)).replace(hour=0, minute=0, second=0, microsecond=0)
    saved = budgets.save_budget(
        storage,
        Budget(
            name="fleet sprint",
            amount=50.0,
            period="custom",
            owner="platform-team",
            custom_start=start,
            custom_end=start + timedelta(days=10),
        ),
        by="test",
    )
    status = budget_status.budget_status(storage, saved, now)
    assert status.spent > 0  # the demo ledger lies inside the period

    page.goto(ledger_server.url + "/budgets?budget=" + quote("fleet sprint"))
    traces = page.wait_for_function(TRACES, timeout=15_000).json_value()
    names = [t["name"] for t in traces]
    assert names == [
        "Actual (cumulative)",
        "Forecast P90",
        "Forecast P10–P90",
        "Forecast P50",
        "Limit",
    ]
    actual, p90, p10, p50, limit = traces
    assert actual["y"] == sorted(actual["y"])  # cumulative
    assert actual["y"][-1] == pytest.approx(status.spent, rel=1e-6)
    assert p50["y"] and all(lo <= mid <= hi for lo, mid, hi in
                            zip(p10["y"], p50["y"], p90["y"], strict=True))  # fmt: skip
    # the band ends at the period total the page states (one draw: the same instant)
    expect(page.locator("#budgets-detail-forecast")).to_have_text(amount(p50["y"][-1]))
    assert p50["y"][-1] == pytest.approx(status.forecast.p50, rel=1e-3)  # seconds apart
    assert limit["y"] == [50.0, 50.0]
    expect(page.locator("#budgets-detail-status")).to_have_text(
        {"ok": "OK", "warning": "Warning", "at_risk": "At risk", "over": "Over"}[status.status]
    )
    expect(page.locator("#budgets-spend-link")).to_have_attribute("href", status.link)
    expect(page.locator("#budgets-detail-changes")).to_contain_text("added")
    assert page.locator("#budgets-list").is_hidden()


def test_overview_tile_shows_the_budgets_the_filters_fall_under(
    ledger_server: LiveService, page: Any
) -> None:
    storage = ledger_server.storage
    now = datetime.now(UTC)
    # a custom period around the demo ledger (at most 4 days old), whatever today's month
    start = (now - timedelta(days=6)).replace(hour=0, minute=0, second=0, microsecond=0)
    for name, scope, limit in (
        ("org", {}, 1_000_000.0),
        ("finance", {"team": "finance-ops"}, 0.01),  # surely over
        ("platform", {"team": "platform"}, 0.01),
    ):
        budgets.save_budget(
            storage,
            Budget(
                name=name,
                amount=limit,
                period="custom",
                custom_start=start,
                custom_end=start + timedelta(days=8),
                owner="o",
                scope=scope,
            ),
            by="test",
        )

    # the demo ships budgets of its own (models/data/demo-alerts.yaml): the organisation's
    # apply to every selection, a team's only to its team
    def tile(**filters: str) -> list[str]:
        return [s.budget.name for s in ov.budget_tile(storage, Filters.last(7, **filters), now)]

    finance = tile(team="finance-ops")
    assert finance[0] == "finance"  # over by far: the most urgent
    assert "org" in finance and "platform" not in finance
    everyone = tile()
    assert "org" in everyone and not {"finance", "platform"} & set(everyone)

    page.goto(ledger_server.url + "/?range=7d&team=finance-ops")
    page.wait_for_selector("#overview-kpi-budget", timeout=30_000)
    label = page.locator(".stat:has(#overview-kpi-budget) .stat-label")
    expect(label).to_have_text("Budget: finance")
    expect(page.locator("#overview-kpi-budget")).to_contain_text("Over")
    expect(page.locator("#overview-budget-more")).to_have_text(f"+{len(finance) - 1} more")
    # the whole organisation: only the budgets whose scope is all of it
    page.goto(ledger_server.url + "/?range=7d")
    page.wait_for_selector("#overview-kpi-budget", timeout=30_000)
    expect(label).to_have_text(f"Budget: {everyone[0]}")
    more = page.locator("#overview-budget-more")
    if len(everyone) > 1:
        expect(more).to_have_text(f"+{len(everyone) - 1} more")
    else:
        expect(more).to_have_count(0)


def test_a_user_makes_and_revokes_an_api_token(secured: LiveService, tab: Any) -> None:
    storage = secured.service.storage
    page, _ = tab
    sign_in(page, secured.url, "vic", PASSWORDS["vic"], "/budgets")
    page.click("a[href^='/account']")
    page.fill("#account-label", "ci budget gate")
    page.click("#account-create")
    token = page.locator("#account-token").input_value()
    assert api_tokens.user_for_token(storage, token).name == "vic"
    row = page.locator("#account-table tr", has_text="ci budget gate")
    expect(row).to_contain_text("active")
    assert token not in page.content().replace(f'value="{token}"', "")  # shown once, there
    # an empty label: the store's message, nothing written
    page.fill("#account-label", "")
    page.click("#account-create")
    expect(page.locator("#account-message .auth-error")).to_contain_text("label")
    assert len(api_tokens.list_tokens(storage, "vic")) == 1
    choose(page, "account-pick", "ci budget gate")
    page.click("#account-revoke")
    expect(row).to_contain_text("revoked")
    assert api_tokens.user_for_token(storage, token) is None


def test_a_stored_budget_fills_the_form_and_saves_back_unchanged() -> None:
    from app.pages.alerts_forms import BUDGET_FORM, budget_values, form_mapping
    from models.alert_config import budget_from_mapping

    for spec in (
        {"period": "weekly", "week_start": "sunday", "timezone": "Europe/Paris"},
        {"period": "quarterly", "reset_day": 15, "idle_policy": "usage", "currency": "eur"},
        {"period": "custom", "custom_start": "2026-12-01", "custom_end": "2026-12-24"},
    ):
        budget = budget_from_mapping(
            {
                "name": "b",
                "amount": 1234.5,
                "owner": "o",
                "scope": {"team": "search", "route": "/q"},
                "thresholds": [25, 75],
                "forecast_alert": False,
                "note": "n",
                **spec,
            }
        )
        values = dict(zip(BUDGET_FORM, budget_values(budget), strict=True))
        assert budget_from_mapping(form_mapping(values)) == budget, spec
