"""Builds the Dash app (the UI half of `inferledger serve`)."""

from __future__ import annotations

from pathlib import Path

import dash

from app import auth, shell
from app.context import EXTENSION_KEY, AppContext
from inferledger.core.settings import Settings
from inferledger.core.storage import Storage

_HERE = Path(__file__).resolve().parent
ASSETS = _HERE.parent / "assets"


def reset_dash_registries() -> None:
    """Dash keeps pages and callbacks in module globals; start every app from a clean slate."""
    dash.page_registry.clear()
    dash._callback.GLOBAL_CALLBACK_LIST.clear()
    dash._callback.GLOBAL_CALLBACK_MAP.clear()


def create_app(settings: Settings, storage: Storage) -> dash.Dash:
    reset_dash_registries()
    app = dash.Dash(
        __name__,
        use_pages=True,
        pages_folder=str(_HERE / "pages"),
        assets_folder=str(ASSETS),
        title="InferLedger",
        update_title=None,
        suppress_callback_exceptions=False,
        # Dash's MCP endpoint would answer outside the sign-in guard's role checks.
        enable_mcp=False,
    )
    app.server.extensions[EXTENSION_KEY] = AppContext(storage=storage, settings=settings)
    auth.install(app, settings, storage)  # sign-in guard, role rules (docs/security.md)
    app.layout = shell.layout
    shell.register_callbacks()
    return app
