"""The admin pages for prices and deployments, in a real browser with sign-in on: an admin
adds a price version (audit trail and all) and sets a deployment's idle policy; a viewer cannot
open them, and a forged change from a viewer is refused on the server."""

from __future__ import annotations

from typing import Any

import pytest
import requests

from inferledger.ledger_fixtures import store_scrapes
from ledger import price_book
from tests.conftest import PASSWORDS, LiveService, choose, sign_in

pytestmark = pytest.mark.browser


def test_admin_adds_a_price_version(secured: LiveService, tab: Any) -> None:
    page, _ = tab
    sign_in(page, secured.url, "ann", PASSWORDS["ann"], "/admin/prices")
    page.wait_for_selector("text=In effect now")
    page.wait_for_selector("#admin-prices-table table")  # the seeded book
    choose(page, "admin-prices-kind", "gpu")
    page.fill("#admin-prices-subject", "H200")
    page.fill("#admin-prices-price", "3.15")
    page.fill("#admin-prices-from", "2026-12-01")
    page.fill("#admin-prices-note", "reserved instances")
    page.click("#admin-prices-add")
    page.wait_for_selector("text=Saved price #")
    page.wait_for_selector("#admin-prices-changes >> text=3.15")
    storage = secured.service.storage
    row = storage.fetchall(
        "select price, source, note from price_book where subject = 'H200' and price = 3.15"
    )
    assert row == [(3.15, "ui", "reserved instances")]
    (change,) = [c for c in price_book.history(storage, 5) if c.new_price == 3.15]
    assert change.changed_by == "ann" and change.action.value == "insert"
    # a bad price: one clear line, nothing written
    page.fill("#admin-prices-subject", "")
    page.click("#admin-prices-add")
    page.wait_for_selector(".auth-error")
    assert storage.scalar("select count(*) from price_book where subject = ''") == 0


def test_admin_sets_an_idle_policy(secured: LiveService, tab: Any) -> None:
    storage = secured.service.storage
    store_scrapes(storage, "r0", "dep-a", 1_780_000_000 * 10**9, [0, 15])
    from ledger.deployments import learn_replicas

    learn_replicas(storage)
    page, _ = tab
    sign_in(page, secured.url, "ann", PASSWORDS["ann"], "/admin/deployments")
    page.wait_for_selector("#admin-deployments-table >> text=dep-a")
    choose(page, "admin-deployments-deployment", "dep-a")
    choose(page, "admin-deployments-policy", "usage")
    page.click("#admin-deployments-set")
    page.wait_for_selector("text=idle cost is now 'usage'")
    assert storage.fetchall("select idle_policy from deployments where deployment = 'dep-a'") == [
        ("usage",)
    ]


def test_a_viewer_cannot_open_or_call_admin_pages(secured: LiveService) -> None:
    session = requests.Session()
    login = session.get(secured.url + "/login", timeout=10)
    csrf = login.text.split('name="csrf" value="')[1].split('"')[0]
    session.post(
        secured.url + "/login",
        data={"name": "vic", "password": PASSWORDS["vic"], "csrf": csrf, "next": "/"},
        timeout=10,
    )
    assert session.get(secured.url + "/admin/prices", timeout=10).status_code == 403
    forged = {
        "output": "..admin-prices-message.children...admin-prices-version.data..",
        "outputs": [
            {"id": "admin-prices-message", "property": "children"},
            {"id": "admin-prices-version", "property": "data"},
        ],
        "inputs": [{"id": "admin-prices-add", "property": "n_clicks", "value": 1}],
        "changedPropIds": ["admin-prices-add.n_clicks"],
        "state": [
            {"id": f"admin-prices-{k}", "property": "value", "value": v}
            for k, v in (
                ("kind", "gpu"),
                ("subject", "H200"),
                ("unit", "gpu_hour"),
                ("price", 0.01),
                ("from", "2026-01-02"),
                ("deployment", ""),
                ("stage", None),
                ("note", "forged"),
            )
        ]
        + [{"id": "admin-prices-version", "property": "data", "value": 0}],
    }
    answer = session.post(secured.url + "/_dash-update-component", json=forged, timeout=10)
    assert answer.status_code == 403
    assert (
        secured.service.storage.scalar("select count(*) from price_book where note = 'forged'") == 0
    )
