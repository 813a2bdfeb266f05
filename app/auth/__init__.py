"""Sign-in for the UI: the login form, sessions, the guard in front of every UI route, role
rules for pages and callbacks, and the routes of the optional OpenID Connect provider.
docs/security.md describes it all for users. The package, along its seams:

- app/auth/session.py — **sessions** and the signed-in user: server-side (ledger/sessions.py),
  Flask's signed cookie (HttpOnly, SameSite=Lax, Secure per auth.cookie_secure) holds a random
  session id and the time of sign-in. Signing out deletes the row, so a copy of the cookie
  stops working too. Also the role checks pages and callbacks call (``require_role``).
- app/auth/guard.py — **the guard** (a Flask before_request) and the **role** rules for pages
  and callbacks: pages declare ``dash.register_page(..., min_role="analyst")`` (default
  viewer); callbacks of shared modules that need more than viewer are listed in
  ``CALLBACK_ROLES`` (CSV downloads need analyst). Callbacks that change something also call
  ``context.require_role`` themselves.
- app/auth/routes.py — /login, /logout and the OIDC provider's routes;
  app/auth/oidc.py — the provider's protocol; app/auth/pages.py — what they show.
- app/auth/limits.py — **failed sign-ins** are logged and limited per user name (exponential
  backoff) and per server, whatever the client's address.

This module puts them together (install) and exports what the rest of the app uses.
"""

from __future__ import annotations

from datetime import timedelta

import dash
import flask
from flask.sessions import SecureCookieSessionInterface

from app.auth.guard import guard_layouts, guard_request
from app.auth.limits import SignInThrottle
from app.auth.oidc import CALLBACK_PATH as OIDC_CALLBACK_PATH
from app.auth.oidc import OidcClient, OidcConfig
from app.auth.routes import (
    LOGIN_PATH,
    LOGOUT_PATH,
    OIDC_START_PATH,
    login,
    logout,
    oidc_callback,
    oidc_start,
)
from app.auth.session import (
    AUTH_KEY,
    AuthState,
    RoleRequiredError,
    current_user,
    enabled,
    may_open,
    observe_sign_ins,
    page_role,
    renew_session,
    require_role,
)
from inferledger.core.errors import InferLedgerError, SettingsError
from inferledger.core.settings import Settings
from inferledger.core.storage import Storage
from ledger import users
from ledger.sessions import SessionStore

__all__ = [
    "AUTH_KEY",
    "SESSION_COOKIE",
    "AuthState",
    "RoleRequiredError",
    "cookie_secure",
    "current_user",
    "enabled",
    "install",
    "may_open",
    "observe_sign_ins",
    "page_role",
    "renew_session",
    "require_role",
]

SESSION_COOKIE = "inferledger_session"


class _SessionCookies(SecureCookieSessionInterface):
    """Flask's signed cookie sessions, with the Secure flag decided per request in auto
    mode (a request that arrived over TLS gets a Secure cookie)."""

    def __init__(self, secure: bool | None) -> None:
        self.secure = secure  # None: auto

    def get_cookie_secure(self, app: flask.Flask) -> bool:
        if self.secure is not None:
            return self.secure
        return flask.has_request_context() and flask.request.is_secure


def cookie_secure(settings: Settings) -> bool | None:
    """Whether the session cookie is Secure: True, False, or None to follow each request
    (auth.cookie_secure auto without an https auth.public_url)."""
    mode = settings["auth.cookie_secure"]
    if mode == "auto":
        return True if settings["auth.public_url"].startswith("https://") else None
    return mode == "true"


def _throttle(settings: Settings) -> SignInThrottle:
    if settings["auth.lockout_max_s"] < settings["auth.lockout_s"]:
        raise SettingsError(
            f"setting 'auth.lockout_max_s' ({settings['auth.lockout_max_s']}) must be at least "
            f"'auth.lockout_s' ({settings['auth.lockout_s']})"
        )
    return SignInThrottle(
        max_failures=settings["auth.lockout_failures"],
        lockout_s=settings["auth.lockout_s"],
        max_lockout_s=settings["auth.lockout_max_s"],
        global_failures=settings["auth.failed_sign_ins_per_minute"],
        global_window_s=60.0,
    )


def install(app: dash.Dash, settings: Settings, storage: Storage) -> AuthState:
    """Put sign-in in front of the app (a no-op guard while auth.enabled is false)."""
    oidc = OidcConfig.from_settings(settings)
    for page in dash.page_registry.values():
        try:
            page_role(page)
        except users.UserError as exc:
            raise InferLedgerError(f"page {page.get('module')}: min_role: {exc}") from None
    auth = AuthState(
        storage=storage,
        enabled=settings["auth.enabled"],
        session_hours=settings["auth.session_hours"],
        throttle=_throttle(settings),
        sessions=SessionStore(storage),
        oidc=OidcClient(oidc) if oidc else None,
        public_url=settings["auth.public_url"],
        dash_app=app,
    )
    server = app.server
    server.extensions[AUTH_KEY] = auth
    if not auth.enabled:
        return auth
    server.secret_key = settings["auth.session_secret"] or users.session_secret(storage)
    server.session_interface = _SessionCookies(cookie_secure(settings))
    server.config.update(
        SESSION_COOKIE_NAME=SESSION_COOKIE,
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SAMESITE="Lax",
        PERMANENT_SESSION_LIFETIME=timedelta(hours=auth.session_hours),
        SESSION_REFRESH_EACH_REQUEST=False,
    )
    server.add_url_rule(LOGIN_PATH, "auth_login", login, methods=["GET", "POST"])
    server.add_url_rule(LOGOUT_PATH, "auth_logout", logout, methods=["GET", "POST"])
    server.add_url_rule(OIDC_START_PATH, "auth_oidc_start", oidc_start)
    server.add_url_rule(OIDC_CALLBACK_PATH, "auth_oidc_callback", oidc_callback)
    server.before_request(guard_request)
    guard_layouts()
    return auth
