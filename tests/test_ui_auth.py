"""Sign-in in a real headless Chromium against a real server with sign-in on: the form (by
keyboard), a wrong password, role rules a viewer meets, an admin adding a user on the Users
page, and signing out. Every page must log no console error but the ones a test expects."""

from __future__ import annotations

from typing import Any

import pytest

from ledger import users
from tests.conftest import PASSWORDS, LiveService, choose, sign_in

pytestmark = pytest.mark.browser


def test_sign_in_by_keyboard_then_sign_out(secured: LiveService, tab: Any) -> None:
    page, _ = tab
    url = secured.url
    page.goto(url + "/?range=24h")
    assert page.url.startswith(url + "/login?next=")
    assert page.title() == "Sign in · InferLedger"
    # a wrong password: the form again, with the message and the name kept
    page.fill("#login-name", "vic")
    page.fill("#login-password", "not-the-password")
    page.click("button[type=submit]")
    page.wait_for_selector("[role=alert]")
    assert page.inner_text("[role=alert]") == "Wrong user name or password."
    assert page.input_value("#login-name") == "vic"
    # by keyboard: the name field has the focus, Tab to the password, Enter signs in
    page.focus("#login-name")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.id") == "login-password"
    page.keyboard.type(PASSWORDS["vic"])
    page.keyboard.press("Enter")
    page.wait_for_selector(".user-badge .user-name")
    assert page.url == url + "/?range=24h"  # back where the user was going, filters kept
    assert page.inner_text(".user-badge .user-name") == "vic"
    assert page.inner_text(".user-badge .user-role") == "viewer"
    nav = page.locator("nav.nav").inner_text()
    assert "Users" not in nav  # no admin pages in a viewer's navigation
    page.click("text=Sign out")
    page.wait_for_selector("text=You have signed out.")
    page.goto(url + "/")
    assert page.url.startswith(url + "/login")


def test_viewer_meets_403_on_the_admin_page(secured: LiveService, tab: Any) -> None:
    page, console = tab
    sign_in(page, secured.url, "vic", PASSWORDS["vic"])
    page.wait_for_selector(".user-badge .user-name")
    console.expect(r"status of 403")
    response = page.goto(secured.url + "/admin/users")
    assert response is not None and response.status == 403
    message = page.inner_text("[role=alert]")
    assert "The page Users needs the admin role; you are signed in as vic (viewer)." in message
    page.click("text=Back to the dashboards")
    page.wait_for_selector(".user-badge .user-name")


def test_admin_adds_and_changes_a_user(secured: LiveService, tab: Any) -> None:
    page, _ = tab
    url, storage = secured.url, secured.service.storage
    sign_in(page, url, "ann", PASSWORDS["ann"])
    page.wait_for_selector(".user-badge .user-name")
    page.click("nav.nav >> text=Users")  # client-side navigation to the admin page
    page.wait_for_selector("#admin-users-table table")
    names = page.locator("#admin-users-table tbody tr td:first-child").all_inner_texts()
    assert names == ["ann", "vic"]
    # a too-short password is refused with the reason, and nothing is added
    page.fill("#admin-users-new-name", "Nora")
    page.fill("#admin-users-new-password", "short")
    page.click("#admin-users-add")
    page.wait_for_selector("#admin-users-message [role=alert]")
    assert "password too short" in page.inner_text("#admin-users-message")
    assert users.get_user(storage, "nora") is None
    page.fill("#admin-users-new-password", "nora-password-1")
    page.click("#admin-users-add")
    page.wait_for_selector("text=Added nora (viewer).")
    page.wait_for_selector("#admin-users-table >> text=nora")
    assert users.authenticate(storage, "nora", "nora-password-1").role is users.Role.VIEWER
    assert page.input_value("#admin-users-new-password") == ""  # not left in the form
    # make her an analyst
    choose(page, "admin-users-target", "nora")
    choose(page, "admin-users-target-role", "analyst")
    page.click("#admin-users-set-role")
    page.wait_for_selector("text=nora is now analyst.")
    assert users.get_user(storage, "nora").role is users.Role.ANALYST
    page.wait_for_selector("#admin-users-changes >> text=set_role")
    changes = page.inner_text("#admin-users-changes")
    assert "set_role" in changes and "viewer -> analyst" in changes
    # an admin cannot lock themself out here
    choose(page, "admin-users-target", "ann")
    page.click("#admin-users-disable")
    page.wait_for_selector("text=You cannot change your own role or account here")
    assert not users.get_user(storage, "ann").disabled
