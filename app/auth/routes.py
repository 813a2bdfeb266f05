"""The sign-in routes: /login (the form and its POST), /logout (GET asks, POST signs out) and the
optional OpenID Connect provider's start and callback (the protocol is in app/auth/oidc.py).

Failed password sign-ins are logged and limited per user name and per server, whatever the
client's address (app/auth/limits.py); a refused attempt checks no password.
"""

from __future__ import annotations

import hmac
import logging
import secrets
import time
from urllib.parse import urlencode, urlsplit

import flask

from app.auth.oidc import OidcError, redirect_uri
from app.auth.pages import login_page, sign_out_page
from app.auth.session import current_user, sign_in, sign_out, state
from ledger import users
from ledger.users import SignInError

# Sign-in's audit lines (docs/security.md, "What is logged") keep the logger name they had
# before app/auth.py became a package, so log lines and filters on "app.auth" read as before.
log = logging.getLogger("app.auth")

LOGIN_PATH = "/login"
LOGOUT_PATH = "/logout"
OIDC_START_PATH = "/login/oidc"
OIDC_FLOW_TTL_S = 600


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


def login() -> flask.Response:
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
    sign_in(user)
    state().on_sign_in("ok")
    log.info("signed in: %s (%s) from %s", user.name, user.role.value, _client())
    return flask.redirect(next_path, 303)


def logout() -> flask.Response:
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
    sign_out()
    return flask.redirect(LOGIN_PATH + "?out=1", 303)


def _redirect_uri() -> str:
    """The OIDC redirect URI: from auth.public_url when set (behind a proxy the request only
    shows the server's own address), else from the request."""
    return redirect_uri(state().public_url or flask.request.host_url)


def oidc_start() -> flask.Response:
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


def oidc_callback() -> flask.Response:
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
    sign_in(user)
    log.info("signed in through %s: %s (%s)", client.config.label, user.name, user.role.value)
    return flask.redirect(safe_next(str(flow.get("next", "/"))), 303)
