"""What every /api/v1/ endpoint shares (app/api.py's budgets, app/api_views.py's views): JSON
answers with ``Cache-Control: no-store``, the read-only method check, bearer-token
authentication (ledger/api_tokens.py), role checks, query-parameter checks, ISO 8601 instants,
and one wrapper that turns every refusal or failure into one JSON error line.

An endpoint raises :class:`ApiAnswer` to answer early (a refusal); :func:`api_endpoint` sends
it, maps an InferLedgerError to its own HTTP status, and logs anything else as a 500.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any

import flask

from inferledger.core.errors import InferLedgerError, one_line
from inferledger.core.times import as_utc
from ledger.api_tokens import TokenRefused, authenticate_token
from ledger.users import Role, User

if TYPE_CHECKING:
    from inferledger.core.storage import Storage

log = logging.getLogger("app.api")

API_PREFIX = "/api/v1/"
READ_METHODS = ("GET", "HEAD")
#: Every method is routed to the endpoints, so a write method gets 405 JSON, not Flask's HTML.
EVERY_METHOD = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]


def json_response(status: int, body: Any, **headers: str) -> flask.Response:
    return flask.Response(
        json.dumps(body, ensure_ascii=False),
        status=status,
        content_type="application/json",
        headers={"Cache-Control": "no-store", **headers},
    )


def error_response(status: int, message: str, **headers: str) -> flask.Response:
    return json_response(status, {"error": message}, **headers)


class ApiAnswer(Exception):
    """An early answer (a refusal): ``raise ApiAnswer(400, "...")``."""

    def __init__(self, status: int, message: str, **headers: str) -> None:
        super().__init__(message)
        self.response = error_response(status, message, **headers)


def check_read_only(req: flask.Request) -> None:
    if req.method not in READ_METHODS:
        raise ApiAnswer(
            405,
            f"{req.method} is not allowed here: the API is read-only (GET).",
            Allow="GET, HEAD",
        )


def authenticate(storage: Storage, req: flask.Request, now: datetime) -> User:
    """The user the request's bearer token acts for; 401 saying why otherwise."""
    scheme, _, token = req.headers.get("Authorization", "").partition(" ")
    try:
        return authenticate_token(
            storage, token.strip() if scheme.lower() == "bearer" else None, now=now
        )
    except TokenRefused as exc:
        raise ApiAnswer(
            401, str(exc), **{"WWW-Authenticate": 'Bearer realm="inferledger"'}
        ) from None


def require_role(user: User, role: Role, what: str) -> None:
    """403 unless `user`'s role includes `role`."""
    if not user.role.allows(role):
        raise ApiAnswer(
            403,
            f"{what} needs the {role.value} role (or admin); this token's user "
            f"{user.name!r} is a {user.role.value}.",
        )


def check_params(req: flask.Request, allowed: Iterable[str]) -> None:
    """400 for a parameter not in `allowed`, or one given twice."""
    names = tuple(allowed)
    unknown = sorted(set(req.args) - set(names))
    if unknown:
        use = f"use {', '.join(names)}" if names else "this path takes none"
        raise ApiAnswer(400, f"unknown parameter {unknown[0][:40]!r}: {use}")
    for name in names:
        if len(req.args.getlist(name)) > 1:
            raise ApiAnswer(400, f"give {name} once")


def parse_instant(name: str, text: str) -> datetime:
    """An ISO 8601 instant (``...Z``, ``+01:00``; without an offset, UTC) as UTC."""
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ApiAnswer(400, f"{name}={text[:40]!r} is not an ISO 8601 instant") from None
    return as_utc(moment)


def api_endpoint(path: str) -> Callable[[Callable[..., flask.Response]], Callable[..., Any]]:
    """Wrap an endpoint: the read-only check first, then one JSON answer for every refusal
    (ApiAnswer), every InferLedgerError (its http_status, e.g. 504 for a read timeout) and any
    other failure (500, logged with its trace)."""

    def wrap(fn: Callable[..., flask.Response]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def endpoint(*args: Any, **kwargs: Any) -> flask.Response:
            try:
                check_read_only(flask.request)
                return fn(*args, **kwargs)
            except ApiAnswer as answer:
                return answer.response
            except InferLedgerError as exc:
                return error_response(exc.http_status, one_line(exc))
            except Exception as exc:  # one clear answer; the log keeps the trace
                log.exception("GET %s failed", path)
                return error_response(500, f"internal error: {one_line(exc, 120)}")

        return endpoint

    return wrap
