"""How pages reach the storage gateway: through the Flask app that serves the request.

The factory stores the service's objects in ``server.extensions["inferledger"]``; callbacks and
layouts call :func:`storage` while Flask handles their request. No module-level globals, so two
apps (two tests) in one process never share a database.
"""

from __future__ import annotations

from dataclasses import dataclass

import flask

from inferledger.settings import Settings
from inferledger.storage import Storage

EXTENSION_KEY = "inferledger"


@dataclass(frozen=True)
class AppContext:
    storage: Storage
    settings: Settings


def current() -> AppContext:
    return flask.current_app.extensions[EXTENSION_KEY]


def storage() -> Storage:
    return current().storage


def allowed(page: dict) -> bool:
    """Whether the signed-in user may open a page (its `min_role`); sign-in lands in app/auth.py."""
    return True


def user_badge():
    """The signed-in user and a sign-out link (app/auth.py); nothing while sign-in is off."""
    from dash import html

    return html.Span(className="user-badge")
