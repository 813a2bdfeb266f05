"""The read-only JSON API (issue #12): ``GET /api/v1/budgets`` for a gateway or a CI job that
acts on budget status (InferLedger itself blocks nothing). docs/api.md, "Budget status API".

Every ``/api/v1/`` request authenticates with a per-user token (``Authorization: Bearer
<token>``, ledger/api_tokens.py), not a session: the sign-in guard lets the prefix through
(app/auth/guard.py) and this module refuses anything without a good token with 401 JSON.
Any role may read budgets. Answers are JSON with ``Cache-Control: no-store``; only GET (and
HEAD) are allowed (405 otherwise), unknown paths under the prefix are 404 JSON.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

import flask

from app.api_common import (
    API_PREFIX,
    EVERY_METHOD,
    ApiAnswer,
    api_endpoint,
    authenticate,
    check_params,
    error_response,
    json_response,
    parse_instant,
)
from app.api_views import register_view_routes
from ledger.budget_status import BudgetStatus, budget_statuses
from ledger.budgets import list_budgets

if TYPE_CHECKING:
    from inferledger.core.storage import Storage

BUDGETS_PATH = "/api/v1/budgets"
_ENDPOINT = "api_v1_budgets"
_QUERY_KEYS = ("name", "at")


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

    @api_endpoint(BUDGETS_PATH)
    def budgets() -> flask.Response:
        req = flask.request
        authenticate(storage, req, clock())  # any role may read budgets
        check_params(req, _QUERY_KEYS)
        at = parse_instant("at", req.args["at"]) if req.args.get("at") else clock()
        name = req.args.get("name")
        chosen = [b for b in list_budgets(storage) if name is None or b.name == name]
        if name is not None and not chosen:
            raise ApiAnswer(404, f"no budget named {name!r}")
        statuses = budget_statuses(storage, at, budgets=chosen, base_url=base_url)
        body = {"as_of": at.isoformat(), "budgets": [budget_json(s) for s in statuses]}
        return json_response(200, body)

    def unknown_path(rest: str) -> flask.Response:
        return error_response(
            404, f"no API at {API_PREFIX}{rest[:80]}: see {API_PREFIX}openapi.json"
        )

    server.add_url_rule(BUDGETS_PATH, _ENDPOINT, budgets, methods=EVERY_METHOD)
    register_view_routes(server, storage, clock=clock, base_url=base_url)
    server.add_url_rule(
        API_PREFIX + "<path:rest>", "api_v1_unknown", unknown_path, methods=EVERY_METHOD
    )
