"""How pages reach the storage gateway: through the Flask app that serves the request.

The factory stores the service's objects in ``server.extensions["inferledger"]``; callbacks and
layouts call :func:`storage` while Flask handles their request. No module-level globals, so two
apps (two tests) in one process never share a database.
"""

from __future__ import annotations

from dataclasses import dataclass

import flask

from app import auth
from inferledger.core.settings import Settings
from inferledger.core.storage import Storage

EXTENSION_KEY = "inferledger"
#: Where the SQL console (ledger/console.py, its worker processes) hangs on the Flask app.
CONSOLE_KEY = "inferledger.console"


@dataclass(frozen=True)
class AppContext:
    storage: Storage
    settings: Settings


def current() -> AppContext:
    return flask.current_app.extensions[EXTENSION_KEY]


def storage() -> Storage:
    return current().storage


def allowed(page: dict) -> bool:
    """Whether the signed-in user may open a page: its `min_role` (default viewer) against
    the user's role (app/auth/session.py). Everyone may while sign-in is off."""
    return auth.may_open(page)


def current_user():
    """The signed-in user (ledger.users.User), or None (nobody, or sign-in is off)."""
    return auth.current_user()


def require_role(role: str):
    """Raise app.auth.RoleRequiredError (a PermissionError) unless the signed-in user has
    `role`; callbacks that change something call this first. A no-op while sign-in is off."""
    return auth.require_role(role)


def user_badge():
    """The signed-in user, the role, and a sign-out link; nothing while sign-in is off."""
    from dash import html

    user = current_user()
    if user is None:
        return html.Span(className="user-badge")
    return html.Span(
        [
            html.Span(user.name, className="user-name"),
            html.Span(user.role.value, className="user-role", title="Your role"),
            # A POST: a link to /logout on another site must not sign anyone out.
            html.Form(
                html.Button("Sign out", type="submit", className="user-signout"),
                action="/logout",
                method="POST",
                className="user-signout-form",
            ),
        ],
        className=f"user-badge role-{user.role.value}",
        title=f"Signed in as {user.name} ({user.role.value})",
    )
