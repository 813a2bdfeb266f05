"""Sign-in for the UI: the login form, sessions, the guard in front of every UI route, role
rules for pages and callbacks, and the routes of the optional OpenID Connect provider (whose
protocol lives in app/oidc.py). docs/security.md describes it all for users.

- **Sessions** are server-side (models/sessions.py): Flask's signed cookie (HttpOnly,
  SameSite=Lax, Secure per auth.cookie_secure) holds a random session id and the time of
  sign-in, and the session lives while its ``auth_sessions`` row does. Signing out deletes the
  row, so a copy of the cookie stops working too. Every request re-reads the user (one indexed
  row): a removed or disabled user, a changed password or an expired sign-in
  (auth.session_hours) ends the session at once, and a changed role applies at once.
- **The guard** (a Flask before_request) lets through only the sign-in routes, the two style
  sheets and the icon the sign-in page uses, health, readiness, /metrics and the ingest
  endpoints (which check their own keys). Anything else needs a signed-in user: a page request
  without one is sent to /login?next=..., anything else (Dash's /_dash-* endpoints, assets)
  answers 401 JSON.
- **Roles.** Pages declare ``dash.register_page(..., min_role="analyst")`` (default viewer).
  Dash serves every page from one route, so the guard matches the requested path against
  ``dash.page_registry`` (403 page), the page's layout refuses client-side navigation, and a
  callback defined in a page's module needs the page's role (403 JSON). Callbacks of shared
  modules that need more than viewer are listed in :data:`CALLBACK_ROLES` (CSV downloads need
  analyst). Callbacks that change something also call ``context.require_role`` themselves.
- **Failed sign-ins** are logged and limited per user name (exponential backoff) and per
  server, whatever the client's address (app/auth_limits.py).
"""

from __future__ import annotations

import hmac
import logging
import re
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

import dash
import flask
from flask.sessions import SecureCookieSessionInterface

from app.auth_limits import SignInThrottle
from app.auth_pages import (
    forbidden_layout,
    forbidden_message,
    forbidden_page,
    json_error,
    login_page,
    sign_out_page,
)
from app.oidc import CALLBACK_PATH as OIDC_CALLBACK_PATH
from app.oidc import OidcClient, OidcConfig, OidcError, redirect_uri
from inferledger.errors import InferLedgerError, SettingsError
from inferledger.settings import Settings
from inferledger.storage import Storage
from models import users
from models.sessions import SessionStore
from models.users import Role, SignInError, User

log = logging.getLogger(__name__)

AUTH_KEY = "inferledger.auth"
SESSION_COOKIE = "inferledger_session"
LOGIN_PATH = "/login"
LOGOUT_PATH = "/logout"
OIDC_START_PATH = "/login/oidc"
CALLBACK_PATH = "/_dash-update-component"
#: Reachable without signing in: sign-in itself, what the sign-in page loads, health and
#: metrics for probes and Prometheus, and ingest (guarded by ingest.keys instead).
PUBLIC_PATHS = frozenset(
    {
        LOGIN_PATH,
        LOGOUT_PATH,
        OIDC_START_PATH,
        OIDC_CALLBACK_PATH,
        "/_favicon.ico",
        "/assets/inferledger.css",
        "/assets/auth.css",
        "/healthz",
        "/readyz",
        "/metrics",
        "/v1/traces",
        "/v1/outcomes",
    }
)
#: Callbacks outside page modules that need more than viewer: (module, function name) -> role.
#: Page modules' callbacks need their page's min_role without being listed.
CALLBACK_ROLES: dict[tuple[str, str], Role] = {
    ("app.components", "_csv"): Role.ANALYST,  # components.chart's "Download CSV"
}
OIDC_FLOW_TTL_S = 600
_CLOCK_SKEW_S = 300


class RoleRequiredError(InferLedgerError, PermissionError):
    """The signed-in user's role does not allow this; ``str(exc)`` says what is needed."""

    http_status = 403


# --- state, sessions, the current user ------------------------------------------------------


@dataclass
class AuthState:
    """What sign-in needs, kept in the Flask app's extensions (no module globals)."""

    storage: Storage
    enabled: bool
    session_hours: int
    throttle: SignInThrottle
    sessions: SessionStore
    oidc: OidcClient | None
    public_url: str = ""
    dash_app: dash.Dash | None = None
    warned_no_user: bool = False
    #: Wall-clock Unix seconds for session times; tests move it instead of sleeping.
    clock: Callable[[], float] = field(default=time.time)
    #: Told each password sign-in's result (ok, failed, refused_account, refused_server).
    on_sign_in: Callable[[str], None] = field(default=lambda result: None)


def state() -> AuthState:
    return flask.current_app.extensions[AUTH_KEY]


def observe_sign_ins(app: dash.Dash, record: Callable[[str], None]) -> None:
    """Have `record` told the result of every password sign-in (the service counts them)."""
    app.server.extensions[AUTH_KEY].on_sign_in = record


def enabled() -> bool:
    return flask.has_request_context() and state().enabled


def current_user() -> User | None:
    """The signed-in user of this request (read once per request); None when nobody is."""
    if not flask.has_request_context():
        return None
    if "inferledger_user" not in flask.g:
        flask.g.inferledger_user = _session_user() if state().enabled else None
    return flask.g.inferledger_user


def _session_user() -> User | None:
    data = flask.session
    session_id, issued = data.get("s"), data.get("t")
    if not isinstance(session_id, str) or not isinstance(issued, int):
        return None
    now = state().clock()
    # The cookie's own sign-in time too: a lowered auth.session_hours applies to sessions
    # already open.
    if not issued - _CLOCK_SKEW_S <= now <= issued + state().session_hours * 3600:
        return None
    return state().sessions.user(session_id, now=now)


def page_role(page: dict[str, Any]) -> Role:
    return users.parse_role(page.get("min_role", Role.VIEWER.value))


def may_open(page: dict[str, Any]) -> bool:
    """Whether this request's user may open a page (everyone while sign-in is off)."""
    if not enabled():
        return True
    user = current_user()
    return user is not None and user.role.allows(page_role(page))


def require_role(role: Role | str) -> User | None:
    """Raise RoleRequiredError unless the signed-in user has `role` (a no-op while sign-in is
    off; then returns None). Callbacks that change something call this first."""
    needed = users.parse_role(role)
    if not enabled():
        return None
    user = current_user()
    if user is None:
        raise RoleRequiredError("You are not signed in; sign in again.")
    if not user.role.allows(needed):
        raise RoleRequiredError(
            f"This needs the {needed.value} role; you are signed in as {user.name} "
            f"({user.role.value})."
        )
    return user


def _start_session(user: User) -> None:
    auth = state()
    now = auth.clock()
    session_id = auth.sessions.start(user, now=now, hours=auth.session_hours)
    flask.session.update({"s": session_id, "u": user.name, "t": int(now)})
    flask.g.inferledger_user = user


def _sign_in(user: User) -> None:
    # A new session id at every sign-in (no session fixation); the one this browser had ends.
    state().sessions.end(flask.session.get("s"))
    flask.session.clear()
    flask.session.permanent = True
    _start_session(user)


def _sign_out() -> None:
    """End this browser's session on the server, then forget the cookie."""
    state().sessions.end(flask.session.get("s"))
    flask.session.clear()


def renew_session(user: User) -> None:
    """Give this browser a new session after the user changed their own password (which ended
    every session of theirs): this one stays signed in, every other one has ended."""
    if enabled() and flask.session.get("u") == user.name:
        _start_session(user)


def safe_next(raw: str | None) -> str:
    """A local path to go to after sign-in; anything else (another host, a scheme, a
    protocol-relative or backslash URL, control characters) becomes '/'."""
    if not raw or not raw.startswith("/") or raw.startswith(("//", "/\\")):
        return "/"
    if any(ord(ch) < 32 or ch == "\\" for ch in raw):
        return "/"
    parts = urlsplit(raw)
    if parts.scheme or parts.netloc:
        return "/"
    if parts.path in (LOGIN_PATH, LOGOUT_PATH) or parts.path.startswith(OIDC_START_PATH):
        return "/"
    return raw


def _client() -> str:
    return flask.request.remote_addr or "unknown"


# --- pages ----------------------------------------------------------------------------------


def _login_page(
    *,
    error: str | None = None,
    notice: str | None = None,
    name: str = "",
    next_path: str = "/",
    status: int = 200,
) -> flask.Response:
    token = flask.session.get("csrf")
    if not isinstance(token, str):
        token = secrets.token_urlsafe(24)
        flask.session["csrf"] = token
    no_user = not users.count_users(state().storage)
    if no_user and not state().warned_no_user:
        state().warned_no_user = True
        log.warning("sign-in is on and no user exists: add one with `inferledger users add`")
    oidc = state().oidc
    return login_page(
        csrf=token,
        next_path=next_path,
        name=name,
        error=error,
        notice=notice,
        no_user=no_user,
        oidc_label=oidc.config.label if oidc is not None else None,
        oidc_href=OIDC_START_PATH + "?" + urlencode({"next": next_path}),
        status=status,
    )


# --- routes ---------------------------------------------------------------------------------


def _login() -> flask.Response:
    req = flask.request
    next_path = safe_next(req.values.get("next"))
    if req.method == "GET":
        if current_user() is not None:
            return flask.redirect(next_path, 303)
        notice = "You have signed out." if req.args.get("out") else None
        return _login_page(notice=notice, next_path=next_path)
    expected = flask.session.get("csrf")
    if not isinstance(expected, str) or not hmac.compare_digest(expected, req.form.get("csrf", "")):
        return _login_page(
            error="The sign-in form expired; please sign in again.",
            next_path=next_path,
            status=400,
        )
    raw_name = req.form.get("name", "")[:254]
    password = req.form.get("password", "")
    throttle = state().throttle
    refusal = throttle.begin(raw_name)
    if refusal is not None:
        # Refused before any password is checked: a locked name or a sprayed server costs
        # no scrypt hash.
        log.warning(
            "sign-in refused for %r from %s: too many failed sign-ins (%s)",
            throttle.key(raw_name),
            _client(),
            "this user name" if refusal.scope == "account" else "all user names",
        )
        resp = _login_page(error=refusal.message, name=raw_name, next_path=next_path, status=429)
        resp.headers["Retry-After"] = str(refusal.seconds)
        state().on_sign_in(f"refused_{refusal.scope}")
        return resp
    try:
        user = users.authenticate(state().storage, raw_name, password)
    except SignInError as exc:
        log.warning(
            "sign-in failed for %r from %s: %s (%d failed for this name)",
            throttle.key(raw_name),
            _client(),
            exc.reason,
            throttle.failures(raw_name),
        )
        state().on_sign_in("failed")
        # 200 with the message, as the form is the answer (the browser shows it again).
        return _login_page(error=str(exc), name=raw_name, next_path=next_path)
    throttle.succeeded(raw_name)
    _sign_in(user)
    state().on_sign_in("ok")
    log.info("signed in: %s (%s) from %s", user.name, user.role.value, _client())
    return flask.redirect(next_path, 303)


def _logout() -> flask.Response:
    """POST signs out. GET only asks (a page with the button): a link or an image on another
    site must not sign anyone out, and the SameSite=Lax cookie is not sent with another
    site's POST."""
    user = current_user()
    if flask.request.method == "GET":
        if user is None:
            return flask.redirect(LOGIN_PATH, 303)
        return sign_out_page(user)
    if user is not None:
        log.info("signed out: %s", user.name)
    _sign_out()
    return flask.redirect(LOGIN_PATH + "?out=1", 303)


def _redirect_uri() -> str:
    """The OIDC redirect URI: from auth.public_url when set (behind a proxy the request only
    shows the server's own address), else from the request."""
    return redirect_uri(state().public_url or flask.request.host_url)


def _oidc_start() -> flask.Response:
    client = state().oidc
    if client is None:
        return flask.redirect(LOGIN_PATH, 303)
    next_path = safe_next(flask.request.args.get("next"))
    flow = {
        "state": secrets.token_urlsafe(24),
        "nonce": secrets.token_urlsafe(24),
        "verifier": secrets.token_urlsafe(64),
        "next": next_path,
        "t": int(time.time()),
    }
    try:
        url = client.authorization_url(
            _redirect_uri(), flow["state"], flow["nonce"], flow["verifier"]
        )
    except OidcError as exc:
        log.warning("OIDC sign-in unavailable: %s", exc)
        return _login_page(error=f"Sign-in with the provider is unavailable: {exc}")
    flask.session["oidc"] = flow
    return flask.redirect(url, 302)


def _oidc_callback() -> flask.Response:
    client = state().oidc
    if client is None:
        return flask.redirect(LOGIN_PATH, 303)
    args = flask.request.args
    flow = flask.session.pop("oidc", None)
    if not isinstance(flow, dict) or int(time.time()) - int(flow.get("t", 0)) > OIDC_FLOW_TTL_S:
        return _login_page(error="The sign-in with the provider expired; please try again.")
    if args.get("error"):
        log.warning("OIDC sign-in refused by the provider: %s", args.get("error"))
        return _login_page(error=f"The provider refused the sign-in ({args.get('error')}).")
    if not hmac.compare_digest(str(flow.get("state", "")), args.get("state", "")):
        log.warning("OIDC callback with a wrong state from %s", _client())
        return _login_page(error="The sign-in with the provider did not match; try again.")
    try:
        email, subject = client.identity(
            args.get("code", ""),
            _redirect_uri(),
            str(flow["verifier"]),
            str(flow["nonce"]),
        )
        user = users.oidc_user(state().storage, email=email, subject=subject)
    except (OidcError, users.UserError) as exc:
        log.warning("OIDC sign-in failed from %s: %s", _client(), exc)
        return _login_page(error=f"Sign-in with the provider failed: {exc}")
    if user.disabled:
        log.warning("OIDC sign-in refused for %r: disabled", user.name)
        return _login_page(error="This account is disabled; ask an admin to enable it.")
    _sign_in(user)
    log.info("signed in through %s: %s (%s)", client.config.label, user.name, user.role.value)
    return flask.redirect(safe_next(str(flow.get("next", "/"))), 303)


# --- the guard ------------------------------------------------------------------------------


def _is_page_request(path: str) -> bool:
    """A browser navigation (what Dash's index route serves), not an XHR or a file."""
    return flask.request.method in ("GET", "HEAD") and not path.startswith(("/_", "/assets/"))


def _template_regex(template: str) -> re.Pattern[str]:
    parts = re.split(r"(<[^>]+>)", template.strip("/"))
    return re.compile("".join("[^/]+" if p.startswith("<") else re.escape(p) for p in parts) + "$")


def page_for_path(path: str) -> dict[str, Any] | None:
    """The registered Dash page a browser path opens, if any."""
    key = path.strip("/")
    for page in dash.page_registry.values():
        template = page.get("path_template")
        if template and _template_regex(template).match(key):
            return page
        if key == str(page.get("path", "")).strip("/"):
            return page
    return None


def callback_role(func: Callable[..., Any]) -> Role:
    """The role a callback needs: its page's min_role when a page module defines it, raised by
    CALLBACK_ROLES for shared ones."""
    module = getattr(func, "__module__", "")
    needed = Role.VIEWER
    for page in dash.page_registry.values():
        if page.get("module") == module:
            needed = page_role(page)
            break
    extra = CALLBACK_ROLES.get((module, getattr(func, "__name__", "")))
    if extra is not None and extra.rank > needed.rank:
        needed = extra
    return needed


def _guard_callback(user: User) -> flask.Response | None:
    body = flask.request.get_json(silent=True)
    output = body.get("output") if isinstance(body, dict) else None
    app = state().dash_app
    entry = app.callback_map.get(output) if app is not None and isinstance(output, str) else None
    if entry is None:
        return None  # Dash answers an unknown callback itself
    flask.g.inferledger_callback = output
    needed = callback_role(entry["callback"])
    if user.role.allows(needed):
        return None
    log.warning(
        "refused callback %s for %s (%s): needs %s",
        output,
        user.name,
        user.role.value,
        needed.value,
    )
    return json_error(403, forbidden_message(user, needed, "This action"), role=needed.value)


def _guard() -> flask.Response | None:
    path = flask.request.path
    if path in PUBLIC_PATHS:
        return None
    user = current_user()
    if user is None:
        if _is_page_request(path):
            query = flask.request.query_string.decode("utf-8", "replace")
            target = path + ("?" + query if query else "")
            return flask.redirect(LOGIN_PATH + "?next=" + quote(target, safe=""), 302)
        return json_error(401, "Sign in first.", login=LOGIN_PATH)
    if path == CALLBACK_PATH:
        return _guard_callback(user)
    if _is_page_request(path):
        page = page_for_path(path)
        if page is not None and not user.role.allows(page_role(page)):
            log.warning("refused page %s for %s (%s)", path, user.name, user.role.value)
            return forbidden_page(user, page_role(page), page["name"])
    return None


def _guard_layouts() -> None:
    """Client-side navigation reaches a page through Dash's router callback, not its path:
    a restricted page's layout refuses itself there. (Dash also calls every layout once,
    outside any callback, to validate ids; that call is let through, so a restricted page's
    layout must not embed data: load it in callbacks.)"""
    for page in dash.page_registry.values():
        if page_role(page) is not Role.VIEWER:
            page["layout"] = _refusing_layout(page, page["layout"])


def _refusing_layout(page: dict[str, Any], original: Any) -> Callable[..., Any]:
    # A closure, not default arguments: Dash passes the query string as keyword arguments.
    def layout(**kwargs: Any) -> Any:
        if "inferledger_callback" in flask.g:
            user = current_user()
            needed = page_role(page)
            if user is None or not user.role.allows(needed):
                return forbidden_layout(user, needed, page["name"])
        return original(**kwargs) if callable(original) else original

    return layout


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
    server.add_url_rule(LOGIN_PATH, "auth_login", _login, methods=["GET", "POST"])
    server.add_url_rule(LOGOUT_PATH, "auth_logout", _logout, methods=["GET", "POST"])
    server.add_url_rule(OIDC_START_PATH, "auth_oidc_start", _oidc_start)
    server.add_url_rule(OIDC_CALLBACK_PATH, "auth_oidc_callback", _oidc_callback)
    server.before_request(_guard)
    _guard_layouts()
    return auth
