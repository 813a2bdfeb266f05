"""Who is signed in and what they may do: the sign-in state kept on the Flask app, the
server-side session behind the cookie, and the role checks pages and callbacks call.

Sessions are server-side (ledger/sessions.py): Flask's signed cookie holds a random session id
and the time of sign-in, and the session lives while its ``auth_sessions`` row does. Every
request re-reads the user (one indexed row), so a removed or disabled user, a changed password
or an expired sign-in (auth.session_hours) ends the session at once, and a changed role applies
at once.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import dash
import flask

from app.auth.limits import SignInThrottle
from app.auth.oidc import OidcClient
from inferledger.core.errors import InferLedgerError
from inferledger.core.storage import Storage
from ledger import users
from ledger.sessions import SessionStore
from ledger.users import Role, User

AUTH_KEY = "inferledger.auth"
_CLOCK_SKEW_S = 300


class RoleRequiredError(InferLedgerError, PermissionError):
    """The signed-in user's role does not allow this; ``str(exc)`` says what is needed."""

    http_status = 403


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


def sign_in(user: User) -> None:
    """Start a session for `user` in this browser (the routes call this once the user is
    known)."""
    # A new session id at every sign-in (no session fixation); the one this browser had ends.
    state().sessions.end(flask.session.get("s"))
    flask.session.clear()
    flask.session.permanent = True
    _start_session(user)


def sign_out() -> None:
    """End this browser's session on the server, then forget the cookie."""
    state().sessions.end(flask.session.get("s"))
    flask.session.clear()


def renew_session(user: User) -> None:
    """Give this browser a new session after the user changed their own password (which ended
    every session of theirs): this one stays signed in, every other one has ended."""
    if enabled() and flask.session.get("u") == user.name:
        _start_session(user)
