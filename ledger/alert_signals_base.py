"""What every data-driven alert kind shares (issue #12): the kinds' parameters and the
dimensions each can be scoped and grouped by, the SQL files in ``sql/alerts/`` run once per
evaluation tick and shared by every rule that needs the same aggregate, the rule's scope filter
and group-by over those aggregates, and the one-line summaries' wording.

The kinds themselves are in ledger/alert_signals_traffic.py (requests, tasks, spend) and
ledger/alert_signals_fleet.py (scrapes); ledger/alert_signals.py is the entry point.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any

import polars as pl

from models.alert_config import DIMENSIONS, AlertRule, ConfigError, scope_key
from models.alert_lifecycle import Observation
from models.spike_detection import DEFAULT_MIN_BASELINE, DEFAULT_MIN_WEEKS, DEFAULT_WEEKS

if TYPE_CHECKING:
    from inferledger.core.storage import Storage

#: Per evaluation tick, the engine passes one dict; aggregates are kept in it under
#: (sql file, bound parameters), so rules of one kind and window share one query.
SignalCache = dict[Any, Any]

#: Each kind's parameters and their defaults (docs/alert-kinds.md defines them). A rule's
#: ``params`` may set any of these and nothing else.
KIND_PARAMS: Mapping[str, Mapping[str, Any]] = {
    "spend_spike": {
        "weeks": DEFAULT_WEEKS,
        "min_weeks": DEFAULT_MIN_WEEKS,
        "min_baseline": DEFAULT_MIN_BASELINE,
    },
    "long_context": {
        "baseline_days": 7,
        "min_requests": 20,
        "percentile": 0.95,
        "baseline_percentile": 0.99,
    },
    "failure_rate": {"baseline_days": 7, "min_requests": 50},
    "slo_burn": {"short_window_s": None, "min_requests": 20, "objective": None},
    "prefix_cache_regression": {"baseline_days": 7, "min_requests": 50},
    "kv_pressure": {"occupancy": 0.9, "preemptions": 10},
    "false_economy": {"min_tasks": 20, "min_unit_cost_drop": 10.0},
    "coverage_gap": {"down_scrapes": 3},
    "unpriced_usage": {},
}

_TASK_DIMENSIONS = ("environment", "team", "app", "route", "workflow")
#: The dimensions a kind's data carries: tasks have no single model or deployment; scrapes
#: know only their deployment (and replica, named in the summary).
KIND_DIMENSIONS: Mapping[str, tuple[str, ...]] = {
    "spend_spike": DIMENSIONS,
    "long_context": DIMENSIONS,
    "failure_rate": DIMENSIONS,
    "slo_burn": DIMENSIONS,
    "prefix_cache_regression": DIMENSIONS,
    "unpriced_usage": DIMENSIONS,
    "false_economy": _TASK_DIMENSIONS,
    "kv_pressure": ("deployment",),
    "coverage_gap": ("deployment",),
}

# parameter name -> (checker, what it must be)
_PARAM_CHECKS: Mapping[str, tuple[Callable[[Any], bool], str]] = {
    "weeks": (lambda v: _is_int(v) and 1 <= v <= 12, "a whole number of weeks from 1 to 12"),
    "min_weeks": (lambda v: _is_int(v) and 1 <= v <= 12, "a whole number of weeks from 1 to 12"),
    "min_baseline": (lambda v: _is_number(v) and v > 0, "a spend per hour > 0"),
    "baseline_days": (lambda v: _is_number(v) and 0 < v <= 31, "a number of days in (0, 31]"),
    "min_requests": (lambda v: _is_int(v) and v >= 1, "a whole number >= 1"),
    "min_tasks": (lambda v: _is_int(v) and v >= 1, "a whole number >= 1"),
    "percentile": (lambda v: _is_number(v) and 0 < v < 1, "a share in (0, 1), e.g. 0.95"),
    "baseline_percentile": (lambda v: _is_number(v) and 0 < v < 1, "a share in (0, 1)"),
    "short_window_s": (
        lambda v: v is None or (_is_number(v) and v > 0),
        "seconds > 0 (default: window_s / 12)",
    ),
    "objective": (lambda v: v is None or (isinstance(v, str) and v != ""), "an SLO name"),
    "occupancy": (lambda v: _is_number(v) and 0 < v <= 1, "a KV-cache share in (0, 1]"),
    "preemptions": (lambda v: _is_int(v) and v >= 1, "a whole number >= 1"),
    "min_unit_cost_drop": (lambda v: _is_number(v) and 0 <= v < 100, "a percent in [0, 100)"),
    "down_scrapes": (lambda v: _is_int(v) and 1 <= v <= 1000, "a whole number from 1 to 1000"),
}


def _is_number(value: Any) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(float(value))
    )


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_signal_rule(rule: AlertRule) -> dict[str, Any]:
    """The rule's kind parameters with defaults filled in; raises ConfigError naming what is
    wrong: a kind that is not data-driven, an unknown or bad parameter, or a scope or group-by
    dimension the kind's data does not carry."""
    if rule.kind not in KIND_PARAMS:
        raise ConfigError(
            f"rule {rule.name!r}: kind {rule.kind!r} is not one of the data-driven kinds "
            f"({', '.join(KIND_PARAMS)})"
        )
    defaults = KIND_PARAMS[rule.kind]
    unknown = sorted(set(rule.params) - set(defaults))
    if unknown:
        known = ", ".join(defaults) or "none"
        raise ConfigError(
            f"rule {rule.name!r}: {rule.kind} has no parameter {', '.join(unknown)} "
            f"(its parameters: {known})"
        )
    params = dict(defaults)
    for name, value in rule.params.items():
        check, what = _PARAM_CHECKS[name]
        if not check(value):
            raise ConfigError(f"rule {rule.name!r}: params.{name} must be {what}, got {value!r}")
        params[name] = value
    if rule.kind == "spend_spike" and params["min_weeks"] > params["weeks"]:
        raise ConfigError(
            f"rule {rule.name!r}: params.min_weeks ({params['min_weeks']}) must be at most "
            f"weeks ({params['weeks']})"
        )
    allowed = KIND_DIMENSIONS[rule.kind]
    for where, dims in (("scope", tuple(rule.scope)), ("group_by", tuple(rule.group_by))):
        bad = [d for d in dims if d not in allowed]
        if bad:
            raise ConfigError(
                f"rule {rule.name!r}: {rule.kind} cannot use {', '.join(bad)} in its {where} "
                f"(its data carries only {', '.join(allowed)})"
            )
    if rule.window_s <= 0:
        raise ConfigError(f"rule {rule.name!r}: window_s must be > 0, got {rule.window_s}")
    return params


def utc(at: datetime) -> datetime:
    if at.tzinfo is None:
        raise ConfigError(f"evaluation time {at.isoformat()} has no time zone")
    return at.astimezone(UTC)


# ---------------------------------------------------------------------------- shared queries
@cache
def _sql(name: str) -> str:
    return resources.files("sql").joinpath("alerts", f"{name}.sql").read_text("utf-8")


def aggregate(
    storage: Storage, name: str, params: Mapping[str, Any], cache: SignalCache
) -> pl.DataFrame:
    """The rows of ``sql/alerts/<name>.sql`` bound to ``params``, run once per tick for the
    same parameters (the cache is the tick's)."""
    key = (name, tuple(sorted(params.items())))
    frame = cache.get(key)
    if frame is None:
        frame = storage.query(_sql(name), dict(params))
        cache[key] = frame
    return frame


def in_scope(frame: pl.DataFrame, scope: Mapping[str, str]) -> pl.DataFrame:
    """The rows whose dimensions equal the scope's values."""
    for dim, value in scope.items():
        frame = frame.filter(pl.col(dim) == value)
    return frame


def grouped(
    frame: pl.DataFrame, group_by: tuple[str, ...], aggs: Iterable[pl.Expr]
) -> list[dict[str, Any]]:
    """One dict per group: the group's dimension values and the aggregates. Without a group-by,
    one dict for the whole (possibly empty) scope."""
    aggs = list(aggs)
    if group_by:
        if frame.is_empty():
            return []
        out = frame.group_by(list(group_by)).agg(aggs)
    else:
        out = frame.select(aggs)
    return out.to_dicts()


def observation(
    rule: AlertRule, row: Mapping[str, Any], value: float | None, summary: str
) -> Observation:
    labels = {dim: row.get(dim) for dim in rule.group_by}
    return Observation(
        scope_key=scope_key(labels),
        value=None if value is None else float(value),
        threshold=rule.threshold,
        summary=summary,
        labels=labels,
    )


# ---------------------------------------------------------------------------- wording
def where(rule: AlertRule, row: Mapping[str, Any]) -> str:
    """The slice an observation is about, as a reader names it: "route /chat (app support)"."""
    labels = {dim: row.get(dim) for dim in rule.group_by} or dict(rule.scope)
    if not labels:
        return "all traffic"
    parts = [f"{dim} {value if value is not None else '(none)'}" for dim, value in labels.items()]
    return parts[0] + (f" ({', '.join(parts[1:])})" if len(parts) > 1 else "")


def duration(seconds: float) -> str:
    """900 -> "15 min", 3600 -> "1 h", 90000 -> "25 h", 604800 -> "7 days"."""
    seconds = float(seconds)
    if seconds % 86400 == 0 and seconds >= 2 * 86400:
        return f"{seconds / 86400:g} days"
    if seconds % 3600 == 0:
        return f"{seconds / 3600:g} h"
    if seconds >= 60:
        return f"{seconds / 60:g} min"
    return f"{seconds:g} s"


def pct(share: float) -> str:
    return f"{100 * share:.1f} %"
