"""The admin pages for prices and deployments, in a real browser with sign-in on: an admin
adds a price version (audit trail and all), ends and supersedes one, pages through the audit
trail, sets a deployment's idle policy and edits an SLO target shown by name; a viewer cannot
open them, and a forged change from a viewer is refused on the server."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from playwright.sync_api import expect

from inferledger.ledger_fixtures import store_scrapes
from ledger import price_book
from tests.conftest import PASSWORDS, LiveService, choose, session_for, sign_in

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
    session = session_for(secured, "vic")
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


def test_admin_ends_and_supersedes_a_price_and_pages_the_audit(
    secured: LiveService, tab: Any
) -> None:
    storage = secured.service.storage
    h100 = price_book.set_price(
        storage, "gpu", "H100", "gpu_hour", 2.5, "2026-01-01", changed_by="t", source="cli"
    )
    total = len(price_book.history(storage, 10_000))
    assert total > 20  # the seed and this insert: more than one page of 20
    page, _ = tab
    sign_in(page, secured.url, "ann", PASSWORDS["ann"], "/admin/prices")
    page.wait_for_selector(f"#admin-prices-page-info >> text=Changes 1–20 of {total}, newest first")
    assert page.is_disabled("#admin-prices-newer") and not page.is_disabled("#admin-prices-older")
    first_row = page.locator("#admin-prices-changes tbody tr").first
    assert f"#{h100} gpu H100-SXM gpu_hour" in first_row.inner_text()  # newest first
    page.click("#admin-prices-older")
    page.wait_for_selector(
        f"#admin-prices-page-info >> text=Changes 21–{min(40, total)} of {total}"
    )
    assert page.locator("#admin-prices-changes tbody tr").count() == min(20, total - 20)
    page.click("#admin-prices-newer")
    page.wait_for_selector("#admin-prices-page-info >> text=Changes 1–20")

    # an end before the start: one clear line, nothing written
    page.fill("#admin-prices-amend-id", str(h100))
    page.fill("#admin-prices-end-at", "2025-12-01")
    page.fill("#admin-prices-reason", "contract over")
    page.click("#admin-prices-end")
    page.wait_for_selector(".auth-error >> text=an end must be after the version's start")
    assert len(price_book.history(storage, 10_000)) == total

    page.fill("#admin-prices-end-at", "2026-06-01")
    page.click("#admin-prices-end")
    page.wait_for_selector(f"text=Ended price #{h100} at 2026-06-01 00:00 UTC")
    page.wait_for_selector("text=what it priced is unpriced")
    assert price_book.get_price(storage, h100).effective_to == datetime(2026, 6, 1, tzinfo=UTC)
    page.wait_for_selector(f"#admin-prices-page-info >> text=of {total + 1}, newest first")
    top = page.locator("#admin-prices-changes tbody tr").first.inner_text()
    assert "end" in top and "contract over" in top and "2026-06-01 00:00 UTC" in top

    page.fill("#admin-prices-corrected", "2.25")
    page.fill("#admin-prices-reason", "invoice says 2.25")
    page.click("#admin-prices-supersede")
    page.wait_for_selector(f"text=Superseded price #{h100} by #")
    [old] = price_book.superseded_versions(storage)
    assert (old.version.price_id, old.version.price, old.changed_by) == (h100, 2.5, "ann")
    new = price_book.get_price(storage, old.superseded_by)
    assert (new.price, new.effective_to, new.source.value) == (
        2.25, datetime(2026, 6, 1, tzinfo=UTC), "ui",
    )  # fmt: skip
    page.wait_for_selector(f"#admin-prices-superseded >> text=#{old.superseded_by}")
    assert "invoice says 2.25" in page.inner_text("#admin-prices-superseded")


def test_admin_edits_an_slo_target_shown_by_name(secured: LiveService, tab: Any) -> None:
    storage = secured.service.storage
    page, _ = tab
    sign_in(page, secured.url, "ann", PASSWORDS["ann"], "/admin/deployments")
    page.wait_for_selector("#admin-deployments-slo-table >> text=/answer ttft p95 ≤ 0.5 s")
    table = page.inner_text("#admin-deployments-slo-table")
    assert "answer-ttft-p95" in table and "target_id" not in table
    choose(page, "admin-deployments-slo-pick", "answer-ttft-p95")
    expect(page.locator("#admin-deployments-slo-route")).to_have_value("/answer")
    page.fill("#admin-deployments-slo-percentile", "99")
    page.fill("#admin-deployments-slo-target", "0.8")
    page.click("#admin-deployments-slo-save")
    page.wait_for_selector("text=SLO target answer-ttft-p95 changed: /answer ttft p99 ≤ 0.8 s.")
    page.wait_for_selector("#admin-deployments-slo-table >> text=/answer ttft p99 ≤ 0.8 s")
    assert storage.fetchall(
        "select percentile, target_s, source from slo_targets where objective = 'answer-ttft-p95'"
    ) == [(0.99, 0.8, "ui")]
    # the audit trail: the change on top, by the signed-in admin, before and after
    seeded = storage.scalar("select count(*) from slo_target_changes where action = 'seeded'")
    changes = "#admin-deployments-slo-changes"
    page.wait_for_selector(f"{changes} >> text=/answer ttft p99 ≤ 0.8 s")
    newest = page.inner_text(f"{changes} tbody tr:first-child")
    assert "ann" in newest and "changed" in newest and "answer-ttft-p95" in newest
    assert "/answer ttft p95 ≤ 0.5 s" in newest
    expect(page.locator("#admin-deployments-slo-page-info")).to_have_text(
        f"Changes 1–{seeded + 1} of {seeded + 1}, newest first"
    )
    # a new objective on an unknown route: refused until confirmed as new
    page.fill("#admin-deployments-slo-objective", "translate-e2e-p90")
    page.fill("#admin-deployments-slo-route", "/translate")
    page.fill("#admin-deployments-slo-percentile", "90")
    page.click("#admin-deployments-slo-save")
    page.wait_for_selector(".auth-error >> text=route /translate has no traffic or target yet")
    assert storage.scalar("select count(*) from slo_targets where route = '/translate'") == 0
    page.click("#admin-deployments-slo-new-route input")
    page.click("#admin-deployments-slo-save")
    page.wait_for_selector("text=SLO target translate-e2e-p90 added")
    page.click("#admin-deployments-slo-remove")
    page.wait_for_selector("text=Removed SLO target translate-e2e-p90.")
    assert storage.scalar("select count(*) from slo_targets where route = '/translate'") == 0
    # the refused save wrote no audit row: added and removed, nothing else
    expect(page.locator("#admin-deployments-slo-page-info")).to_have_text(
        f"Changes 1–{seeded + 3} of {seeded + 3}, newest first"
    )
    rows = page.locator(f"{changes} tbody tr")
    assert "removed" in rows.nth(0).inner_text() and "added" in rows.nth(1).inner_text()


def test_removed_slo_targets_say_so_and_can_be_restored(secured: LiveService, tab: Any) -> None:
    from ledger import slo_targets

    storage = secured.service.storage
    for target in slo_targets.list_slo_targets(storage):
        slo_targets.remove_slo_target(storage, target.objective, changed_by="bob")
    page, _ = tab
    sign_in(page, secured.url, "ann", PASSWORDS["ann"], "/admin/deployments")
    page.wait_for_selector("#admin-deployments-slo-table >> text=they were removed")
    restore = page.locator("#admin-deployments-slo-restore")
    expect(restore).to_be_visible()
    page.wait_for_selector("#admin-deployments-slo-changes >> text=bob")
    restore.click()
    page.wait_for_selector("text=Restored")
    page.wait_for_selector("#admin-deployments-slo-table >> text=/answer ttft p95 ≤ 0.5 s")
    expect(restore).to_be_hidden()
    newest = page.inner_text("#admin-deployments-slo-changes tbody tr:first-child")
    assert "ann" in newest and "seeded" in newest
    assert storage.scalar(
        "select count(*) from slo_target_changes where action = 'seeded' and changed_by = 'ann'"
    ) == storage.scalar("select count(*) from slo_targets")


def test_a_viewer_cannot_end_a_price_or_edit_an_slo_target(secured: LiveService) -> None:
    storage = secured.service.storage
    h100 = price_book.set_price(
        storage, "gpu", "H100", "gpu_hour", 2.5, "2026-01-01", changed_by="t", source="cli"
    )
    session = session_for(secured, "vic")
    assert session.get(secured.url + "/admin/deployments", timeout=10).status_code == 403
    outputs = [d["output"] for d in session.get(secured.url + "/_dash-dependencies").json()]
    amend = next(o for o in outputs if o.startswith("..admin-prices-message.children@"))
    slo = next(o for o in outputs if o.startswith("..admin-deployments-message.children@"))

    def state(prefix: str, values: dict[str, Any]) -> list[dict[str, Any]]:
        return [{"id": f"{prefix}-{k}", "property": p, "value": v} for k, (p, v) in values.items()]

    forged_end = {
        "output": amend,
        "inputs": [
            {"id": "admin-prices-end", "property": "n_clicks", "value": 1},
            {"id": "admin-prices-supersede", "property": "n_clicks", "value": 0},
        ],
        "changedPropIds": ["admin-prices-end.n_clicks"],
        "state": state(
            "admin-prices",
            {
                "amend-id": ("value", h100),
                "end-at": ("value", "2026-02-01"),
                "corrected": ("value", None),
                "reason": ("value", "forged"),
                "version": ("data", 0),
            },
        ),
    }
    forged_slo = {
        "output": slo,
        "inputs": [
            {"id": "admin-deployments-slo-save", "property": "n_clicks", "value": 0},
            {"id": "admin-deployments-slo-remove", "property": "n_clicks", "value": 1},
        ],
        "changedPropIds": ["admin-deployments-slo-remove.n_clicks"],
        "state": state(
            "admin-deployments",
            {
                "slo-objective": ("value", "answer-ttft-p95"),
                "slo-route": ("value", None),
                "slo-stage": ("value", None),
                "slo-percentile": ("value", None),
                "slo-target": ("value", None),
                "slo-note": ("value", None),
                "slo-new-route": ("value", []),
                "version": ("data", 0),
            },
        ),
    }
    for forged in (forged_end, forged_slo):
        answer = session.post(secured.url + "/_dash-update-component", json=forged, timeout=10)
        assert answer.status_code == 403
    assert price_book.get_price(storage, h100).effective_to is None
    assert storage.scalar("select count(*) from slo_targets where objective = 'answer-ttft-p95'")


def test_admin_pages_through_the_users_audit_trail(secured: LiveService, tab: Any) -> None:
    from ledger import users

    storage = secured.service.storage
    for i in range(23):
        users.add_user(storage, f"u{i:02d}", "viewer", f"password-{i:02d}-long", by="ann")
    total = users.user_changes_page(storage, 0, 20).total
    assert total == 2 + 23  # ann and vic, then these
    last = users.user_changes_page(storage, 999, 20)
    assert (last.offset, [c.user_name for c in last.changes]) == (
        20,
        ["u02", "u01", "u00", "vic", "ann"],
    )
    page, _ = tab
    sign_in(page, secured.url, "ann", PASSWORDS["ann"], "/admin/users")
    page.wait_for_selector(f"#admin-users-page-info >> text=Changes 1–20 of {total}, newest first")
    assert page.locator("#admin-users-changes tbody tr").first.inner_text().count("u22") == 1
    page.click("#admin-users-older")
    page.wait_for_selector(f"#admin-users-page-info >> text=Changes 21–{total} of {total}")
    rows = page.locator("#admin-users-changes tbody tr")
    assert rows.count() == 5 and "ann" in rows.last.inner_text()
    assert page.is_disabled("#admin-users-older")
