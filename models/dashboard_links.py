"""Links into the dashboard (issue #12): the URL of a page filtered to a scope and a time range,
for notifications (ledger/alert_engine.py) and budget status (ledger/budget_status.py).

The query format is app/filters.py's (``?range=custom&start=...&end=...&team=...``). models/ and
ledger/ must not import app/, so this restates it; tests/test_dashboard_links.py parses every
link built here with ``app.filters.parse`` so the two cannot drift apart.

Only the dimensions the filter bar knows become filters (:data:`URL_KEYS`: environment, team,
app, route, model). A scope on workflow or deployment has no URL filter yet: those labels are
left out, so such a link shows the wider slice (:func:`unlinked_dimensions` names them, for a
caller that wants to say so).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from urllib.parse import urlencode

from inferledger.core.times import as_utc

#: The pages a link may open (their Dash paths).
PAGES: tuple[str, ...] = (
    "/spend",
    "/requests",
    "/latency",
    "/gpu",
    "/economics",
    "/budgets",
    "/alerts",
)
#: Scope dimension -> URL key, the same map as ledger.page_data.FILTER_KEYS (the filter bar's
#: equality filters), in the filter bar's order.
URL_KEYS: dict[str, str] = {
    "environment": "env",
    "team": "team",
    "app": "app",
    "route": "route",
    "model": "model",
}
#: Extra keys a link may carry beside the filters: the idle policy and the page-level choices
#: of app.filters.PAGE_KEYS.
EXTRA_KEYS: tuple[str, ...] = ("idle", "by", "models_of")
#: The idle policies the filter bar offers (models.idle_policy.IDLE_CHOICES).
IDLE_VALUES: tuple[str, ...] = ("separate", "usage", "even", "configured")


def unlinked_dimensions(scope: Mapping[str, str | None]) -> tuple[str, ...]:
    """The scope's dimensions (with a value) that a dashboard link cannot filter on."""
    return tuple(k for k, v in scope.items() if v and k not in URL_KEYS)


def dashboard_link(
    base_url: str,
    page: str,
    *,
    scope: Mapping[str, str | None],
    start: datetime,
    end: datetime,
    extra: Mapping[str, str] | None = None,
) -> str:
    """The URL of dashboard `page` filtered to `scope` over [start, end).

    `base_url` is the public address (``auth.public_url``; '' gives a relative link), with or
    without a trailing slash. `start`/`end` are aware datetimes (naive ones are taken as UTC),
    written in UTC to the minute: start rounded down, end rounded up, so the linked window
    holds the whole range. `extra` may set ``idle`` and the page-level keys ``by``/``models_of``.
    Raises ValueError for an unknown page, an unknown extra key, an idle policy the dashboard
    does not offer, or end <= start.
    """
    if page not in PAGES:
        raise ValueError(f"unknown dashboard page {page!r} (one of {', '.join(PAGES)})")
    begin, until = as_utc(start), as_utc(end)
    if until <= begin:
        raise ValueError(f"link range end {until:%Y-%m-%d %H:%M} is not after its start")
    begin = begin.replace(second=0, microsecond=0)
    floor_end = until.replace(second=0, microsecond=0)
    until = floor_end if floor_end == until else floor_end + timedelta(minutes=1)
    pairs: list[tuple[str, str]] = [
        ("range", "custom"),
        ("start", begin.strftime("%Y-%m-%dT%H:%M")),
        ("end", until.strftime("%Y-%m-%dT%H:%M")),
    ]
    pairs += [(key, str(scope[dim])) for dim, key in URL_KEYS.items() if scope.get(dim)]
    for key, value in (extra or {}).items():
        if key not in EXTRA_KEYS:
            raise ValueError(f"unknown link key {key!r} (one of {', '.join(EXTRA_KEYS)})")
        if key == "idle" and value not in IDLE_VALUES:
            raise ValueError(f"unknown idle policy {value!r} (one of {', '.join(IDLE_VALUES)})")
        if value:
            pairs.append((key, value))
    # ":" left as is, like app.filters.UrlState.query_string: readable datetimes in the link.
    return f"{base_url.rstrip('/')}{page}?{urlencode(pairs, safe=':')}"
