"""What the Unit economics, Latency & stages and GPU & cache pages say about their data beside
the numbers: the time range in words, and which active global filters a card cannot apply
(deployment-level marts have no team or app; latency histograms have no team), so a page says
so instead of silently ignoring a filter. The numbers themselves come from sql/queries.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from ledger.queries import Filters

#: The global filters in the filter bar's order: Filters field -> URL key (as the user sees it).
FILTER_KEYS = {
    "environment": "env",
    "team": "team",
    "app": "app",
    "route": "route",
    "model": "model",
}


def range_label(filters: Filters) -> str:
    """The time range as the pages print it: '2026-11-23 03:00 to 2026-11-30 03:00 UTC'."""
    return f"{filters.start:%Y-%m-%d %H:%M} to {filters.end:%Y-%m-%d %H:%M} UTC"


def unapplied_filters(filters: Filters, applies: Collection[str]) -> list[str]:
    """The active filters (as 'team=finance-ops') that a card cannot apply, in the filter bar's
    order. ``applies`` names the Filters fields the card honours."""
    unknown = set(applies) - set(FILTER_KEYS)
    if unknown:
        raise ValueError(f"unknown filter field {sorted(unknown)[0]!r}")
    params = filters.params()
    return [
        f"{key}={params[field]}"
        for field, key in FILTER_KEYS.items()
        if params[field] and field not in applies
    ]


def scope_note(filters: Filters, applies: Collection[str], reason: str) -> str:
    """One sentence naming the active filters a card cannot apply and why ('' when none):
    'Not narrowed by team=finance-ops: these numbers are per deployment.'"""
    ignored = unapplied_filters(filters, applies)
    if not ignored:
        return ""
    return f"Not narrowed by {_join(ignored)}: {reason}"


def rows_by(rows: Sequence[Mapping[str, Any]], key: str) -> dict[Any, list[Mapping[str, Any]]]:
    """Rows grouped by the value of one column, groups in order of first appearance (one
    chart trace per group)."""
    groups: dict[Any, list[Mapping[str, Any]]] = {}
    for row in rows:
        groups.setdefault(row[key], []).append(row)
    return groups


def _join(items: Sequence[str]) -> str:
    if len(items) == 1:
        return items[0]
    return ", ".join(items[:-1]) + " and " + items[-1]
