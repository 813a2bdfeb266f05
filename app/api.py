"""The read-only JSON API (issue #12): ``GET /api/v1/budgets`` for a gateway or a CI job that
acts on budget status (InferLedger itself blocks nothing). docs/api.md, "Budget status API".

Every ``/api/v1/`` request authenticates with a per-user token (``Authorization: Bearer
<token>``, ledger/api_tokens.py), not a session: the sign-in guard lets the prefix through
(app/auth/guard.py) and this module refuses anything without a good token with 401 JSON.
Any role may read budgets. Answers are JSON with ``Cache-Control: no-store``; only GET (and
HEAD) are allowed (405 otherwise), unknown paths under the prefix are 404 JSON.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

import flask

from inferledger.core.errors import InferLedgerError, one_line
from inferledger.core.times import as_utc
from ledger.api_tokens import TokenRefused, authenticate_token
from ledger.budget_status import BudgetStatus, budget_statuses
from ledger.budgets import list_budgets

if TYPE_CHECKING:
    from inferledger.core.storage import Storage

log = logging.getLogger("app.api")

API_PREFIX = "/api/v1/"
BUDGETS_PATH = "/api/v1/budgets"
_ENDPOINT = "api_v1_budgets"
_QUERY_KEYS = ("name", "at")


def _json(status: int, body: dict[str, Any], **headers: str) -> flask.Response:
    return flask.Response(
        json.dumps(body, ensure_ascii=False),
        status=status,
        content_type="application/json",
        headers={"Cache-Control": "no-store", **headers},
    )


def _error(status: int, message: str, **headers: str) -> flask.Response:
    return _json(status, {"error": message}, **headers)


def _number(value: float | None, digits: int = 6) -> float | None:
    if value is None or not math.isfinite(value):
        return None
    return round(value, digits)


def _local(moment: datetime | None, tz: str) -> str | None:
    """An instant as ISO 8601 with its offset, in the budget's time zone."""
    return None if moment is None else moment.astimezone(ZoneInfo(tz)).isoformat()


def budget_json(s: BudgetStatus) -> dict[str, Any]:
    """One budget's status as the API returns it (docs/api.md)."""
    b, f = s.budget, s.forecast
    return {
        "name": b.name,
        "scope": dict(b.scope),
        "period": b.period,
        "timezone": b.timezone,
        "period_start": _local(s.period_start, b.timezone),
        "period_end": _local(s.period_end, b.timezone),
        "amount": b.amount,
        "currency": s.currency,
        "thresholds": list(b.thresholds),
        "idle_policy": b.idle_policy or "configured",
        "spent": _number(s.spent),
        "spent_pct": _number(s.spent_pct, 3),
        "forecast": {"p10": _number(f.p10), "p50": _number(f.p50), "p90": _number(f.p90)},
        "forecast_pct": _number(s.forecast_pct, 3),
        "status": s.status,
        "threshold_crossed": s.threshold_crossed,
        "burn_rate_per_day": _number(f.burn_rate_per_day),
        "days_to_exhaustion": _number(f.days_to_exhaustion, 3),
        "exhaustion_at": _local(f.exhaustion_at, b.timezone),
        "coverage_complete": s.coverage_complete,
        "coverage_pct": _number(s.coverage_pct, 3),
        "incomplete_hours": len(s.incomplete_hours),
        "owner": b.owner,
        "source": b.source,
        "link": s.link,
    }


def _parse_at(text: str) -> datetime:
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"at={text[:40]!r} is not an ISO 8601 instant") from None
    return as_utc(moment)


def register_api(
    server: flask.Flask,
    storage: Storage,
    *,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    base_url: str = "",
) -> None:
    """Add the /api/v1/ routes to the Flask server. `base_url` (auth.public_url) makes the
    budgets' dashboard links absolute. Registering twice is a no-op."""
    if _ENDPOINT in server.view_functions:
        return

    def budgets() -> flask.Response:
        req = flask.request
        if req.method not in ("GET", "HEAD"):
            return _error(405, f"{req.method} is not allowed here: the API is read-only (GET).",
                          Allow="GET, HEAD")  # fmt: skip
        header = req.headers.get("Authorization", "")
        scheme, _, token = header.partition(" ")
        try:
            user = authenticate_token(
                storage, token.strip() if scheme.lower() == "bearer" else None, now=clock()
            )
        except TokenRefused as exc:
            return _error(401, str(exc), **{"WWW-Authenticate": 'Bearer realm="inferledger"'})
        unknown = sorted(set(req.args) - set(_QUERY_KEYS))
        if unknown:
            return _error(400, f"unknown parameter {unknown[0]!r}: use name and at")
        try:
            at = _parse_at(req.args["at"]) if req.args.get("at") else clock()
        except ValueError as exc:
            return _error(400, str(exc))
        name = req.args.get("name")
        try:
            chosen = [b for b in list_budgets(storage) if name is None or b.name == name]
            if name is not None and not chosen:
                return _error(404, f"no budget named {name!r}")
            statuses = budget_statuses(storage, at, budgets=chosen, base_url=base_url)
        except InferLedgerError as exc:
            return _error(exc.http_status, one_line(exc))
        except Exception as exc:  # one clear answer; the log keeps the trace
            log.exception("GET %s failed for %s", BUDGETS_PATH, user.name)
            return _error(500, f"internal error: {one_line(exc, 120)}")
        body = {"as_of": at.isoformat(), "budgets": [budget_json(s) for s in statuses]}
        return _json(200, body)

    def unknown_path(rest: str) -> flask.Response:
        return _error(404, f"no API at {API_PREFIX}{rest[:80]}: see {BUDGETS_PATH}")

    every = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
    server.add_url_rule(BUDGETS_PATH, _ENDPOINT, budgets, methods=every)
    server.add_url_rule(API_PREFIX + "<path:rest>", "api_v1_unknown", unknown_path, methods=every)
