"""The guard in front of every UI route, and the role rules for pages and callbacks.

The guard (a Flask before_request) lets through only the sign-in routes, the two style sheets
and the icon the sign-in page uses, health, readiness, /metrics, the ingest endpoints (which
check their own keys) and the read-only API under /api/v1/ (app/api.py: every request there
needs a bearer API token, checked by the API itself). Anything else needs a signed-in user: a
page request without one is sent to /login?next=..., anything else (Dash's /_dash-* endpoints,
assets) answers 401 JSON.

Pages declare ``dash.register_page(..., min_role="analyst")`` (default viewer). Dash serves every
page from one route, so the guard matches the requested path against ``dash.page_registry``
(403 page), the page's layout refuses client-side navigation, and a callback defined in a page's
module needs the page's role (403 JSON). Callbacks of shared modules that need more than viewer
are listed in :data:`CALLBACK_ROLES`.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import dash
import flask

from app.auth.oidc import CALLBACK_PATH as OIDC_CALLBACK_PATH
from app.auth.pages import forbidden_layout, forbidden_message, forbidden_page, json_error
from app.auth.routes import LOGIN_PATH, LOGOUT_PATH, OIDC_START_PATH
from app.auth.session import current_user, page_role, state
from ledger.users import Role, User

# The logger name of sign-in's audit lines, as in app/auth/routes.py.
log = logging.getLogger("app.auth")

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
#: The read-only API's prefix: its routes (app/api.py) authenticate every request with an API
#: token and answer JSON, so no session is asked for; app/api.py owns every path under it.
API_PREFIX = "/api/v1/"
#: Callbacks outside page modules that need more than viewer: (module, function name) -> role.
#: Page modules' callbacks need their page's min_role without being listed.
#: (components.chart's "Download CSV" is not listed since issue #10: viewers download the numbers
#: behind the charts they browse; the request explorer's CSV is its analyst-only page's.)
CALLBACK_ROLES: dict[tuple[str, str], Role] = {
    # acknowledging an alert is an analyst's act on a page viewers browse (issue #12)
    ("pages.alerts", "_acknowledge"): Role.ANALYST,
    # the capacity planner: viewers read saved plans; planning and deciding is an analyst's
    # (issue #13)
    ("pages.capacity", "_load"): Role.ANALYST,
    ("pages.capacity", "_mark_assumed"): Role.ANALYST,
    ("pages.capacity", "_run"): Role.ANALYST,
    ("pages.capacity", "_cancel"): Role.ANALYST,
    ("pages.capacity", "_save"): Role.ANALYST,
    ("pages.capacity", "_decide"): Role.ANALYST,
}


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


def guard_request() -> flask.Response | None:
    """Flask's before_request: None lets the request through, else the answer (a redirect to
    sign in, 401 or 403)."""
    path = flask.request.path
    if path in PUBLIC_PATHS or path.startswith(API_PREFIX):
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


def guard_layouts() -> None:
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
