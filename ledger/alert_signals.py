"""The nine data-driven alert kinds' values over the ledger (issue #12): for one rule at one
instant, one :class:`models.alert_lifecycle.Observation` per group of the rule's ``group_by``
within its ``scope`` (higher is worse; None: no data for that group), which the alert engine
(ledger/alert_engine.py) hands to ``models.alert_lifecycle.evaluate``.

    observations = signal_observations(storage, rule, at, cache=tick_cache)

What each kind's value is, its parameters and their defaults: docs/alert-kinds.md (the code
is in ledger/alert_signals_traffic.py and ledger/alert_signals_fleet.py). The budget kinds are
ledger/budget_status.py's.

``cache``: one dict per evaluation tick. Rules of the same kind and window share one aggregate
query (grouped by every dimension once; each rule filters and groups it in polars), so 200
rules cost a few dozen queries (bench/rule_eval.py).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ledger.alert_signals_base import KIND_DIMENSIONS, KIND_PARAMS, check_signal_rule, utc
from ledger.alert_signals_fleet import coverage_gap, kv_pressure
from ledger.alert_signals_traffic import (
    failure_rate,
    false_economy,
    long_context,
    prefix_cache_regression,
    slo_burn,
    spend_spike,
    unpriced_usage,
)
from models.alert_config import AlertRule

if TYPE_CHECKING:
    from inferledger.core.storage import Storage
    from models.alert_lifecycle import Observation

__all__ = [
    "KIND_DIMENSIONS",
    "KIND_PARAMS",
    "SIGNAL_KINDS",
    "check_signal_rule",
    "signal_observations",
]

_KINDS: dict[str, Callable[..., list[Observation]]] = {
    "spend_spike": spend_spike,
    "long_context": long_context,
    "failure_rate": failure_rate,
    "slo_burn": slo_burn,
    "prefix_cache_regression": prefix_cache_regression,
    "kv_pressure": kv_pressure,
    "false_economy": false_economy,
    "coverage_gap": coverage_gap,
    "unpriced_usage": unpriced_usage,
}
#: the kinds this module evaluates (every kind but the two budget kinds)
SIGNAL_KINDS: tuple[str, ...] = tuple(_KINDS)


def signal_observations(
    storage: Storage,
    rule: AlertRule,
    at: datetime,
    *,
    cache: dict[Any, Any] | None = None,
) -> list[Observation]:
    """The rule's observations at ``at`` over the window ``[at - rule.window_s, at)``, sorted
    by scope key. Raises ConfigError (models.alert_config) for a budget kind, an unknown or bad
    parameter, or a dimension the kind's data does not carry; nothing is written."""
    params = check_signal_rule(rule)
    observations = _KINDS[rule.kind](storage, rule, params, utc(at), {} if cache is None else cache)
    return sorted(observations, key=lambda o: o.scope_key)
