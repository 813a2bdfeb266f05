"""The alert kinds read from the request, task and spend marts (issue #12; values defined in
docs/alert-kinds.md): spend_spike, long_context, failure_rate, slo_burn,
prefix_cache_regression, unpriced_usage and false_economy. Each returns one Observation per
group of the rule's ``group_by`` within its ``scope``; the shared aggregates come from
``sql/alerts/signal_*.sql`` through :func:`ledger.alert_signals_base.aggregate`.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import polars as pl

from ledger.alert_signals_base import (
    SignalCache,
    aggregate,
    duration,
    grouped,
    in_scope,
    observation,
    pct,
    where,
)
from models.alert_config import AlertRule
from models.spike_detection import same_hour_of_week_baseline

if TYPE_CHECKING:
    from inferledger.core.storage import Storage
    from models.alert_lifecycle import Observation

HOUR = timedelta(hours=1)
#: prompt-size buckets per doubling in sql/alerts/signal_long_context.sql
BUCKETS_PER_DOUBLING = 16
#: slo_burn's error budget for a 100 % objective (1 - percentile would be 0)
MIN_ERROR_BUDGET = 0.001


W = pl.col("in_window")  # rows of the window ...
B = ~pl.col("in_window")  # ... and of its baseline


def _windowed(
    storage: Storage,
    name: str,
    at: datetime,
    window_s: int,
    baseline_s: float,
    cache: SignalCache,
) -> pl.DataFrame:
    window_start = at - timedelta(seconds=window_s)
    params = {
        "baseline_start": window_start - timedelta(seconds=baseline_s),
        "window_start": window_start,
        "end": at,
    }
    return aggregate(storage, name, params, cache)


# ---------------------------------------------------------------------------- spend_spike
def _floor_hour(t: datetime) -> datetime:
    return t.replace(minute=0, second=0, microsecond=0)


def spend_spike(
    storage: Storage, rule: AlertRule, params: dict[str, Any], at: datetime, cache: SignalCache
) -> list[Observation]:
    """Spend in the window's hours ÷ the same hours of the week in the weeks before (the
    baseline and ratio of models/spike_detection.py, summed over the window's hours)."""
    weeks, min_weeks = int(params["weeks"]), int(params["min_weeks"])
    min_baseline = float(params["min_baseline"])
    first = _floor_hour(at - timedelta(seconds=rule.window_s))
    # the hours the window touches: whole hours, and the current one up to `at`, weighted by
    # the share of it that has passed (its baseline is scaled, not its spend extrapolated)
    hours: list[tuple[datetime, float]] = []
    h = first
    while h < at:
        hours.append((h, min(1.0, (at - h) / HOUR)))
        h += HOUR
    frame = aggregate(
        storage,
        "signal_spend",
        {"window_hour": first, "end": at, "weeks": weeks, "span_s": len(hours) * 3600},
        cache,
    )
    # an hour in which the ledger has any spend row: there, a group without a row spent 0;
    # an hour before the ledger began is absent (no baseline), not zero
    ledger_hours = set(frame.get_column("hour").to_list()) if not frame.is_empty() else set()
    frame = in_scope(frame, rule.scope)
    keys = list(rule.group_by)
    by_group: dict[tuple[Any, ...], dict[datetime, float]] = {}
    if not frame.is_empty():
        summed = frame.group_by([*keys, "hour"]).agg(pl.col("spend").sum())
        for row in summed.to_dicts():
            group = tuple(row[k] for k in keys)
            by_group.setdefault(group, {})[row["hour"]] = max(0.0, float(row["spend"] or 0.0))
    if not keys:
        by_group.setdefault((), {})
    out = []
    for group, spend in sorted(by_group.items(), key=lambda kv: str(kv[0])):
        row = dict(zip(keys, group, strict=True))
        index = dict.fromkeys(ledger_hours, 0.0) | spend
        actual = expected = 0.0
        counted = 0
        for hour, weight in hours:
            baseline = same_hour_of_week_baseline(index, hour, weeks=weeks)
            if baseline.n_weeks < min_weeks:
                continue  # too little history for this hour: left out on both sides
            counted += 1
            actual += spend.get(hour, 0.0)
            # spike_ratio's denominator, scaled to the share of the hour that has passed
            expected += weight * max(baseline.median or 0.0, min_baseline)
        if counted == 0:
            out.append(
                observation(
                    rule,
                    row,
                    None,
                    f"{where(rule, row)}: fewer than {min_weeks} weeks of spend history",
                )
            )
            continue
        ratio = actual / expected
        out.append(
            observation(
                rule,
                row,
                ratio,
                f"{where(rule, row)} spent ${actual:,.2f} over the last "
                f"{duration(rule.window_s)}, {ratio:.1f}x its usual ${expected:,.2f} for these "
                f"hours of the week",
            )
        )
    return out


# ---------------------------------------------------------------------------- long_context
def _bucket_quantile(buckets: dict[int, int], q: float) -> float | None:
    total = sum(buckets.values())
    if total == 0:
        return None
    need = q * total
    seen = 0
    for bucket in sorted(buckets):
        seen += buckets[bucket]
        if seen >= need:
            return float(2 ** ((bucket + 0.5) / BUCKETS_PER_DOUBLING))
    return None  # unreachable: seen ends at total >= need


def long_context(
    storage: Storage, rule: AlertRule, params: dict[str, Any], at: datetime, cache: SignalCache
) -> list[Observation]:
    """The window's prompt-size percentile ÷ the group's baseline percentile."""
    frame = _windowed(
        storage,
        "signal_long_context",
        at,
        rule.window_s,
        float(params["baseline_days"]) * 86400,
        cache,
    )
    frame = in_scope(frame, rule.scope)
    keys = list(rule.group_by)
    groups: dict[tuple[Any, ...], tuple[dict[int, int], dict[int, int]]] = {}
    if not frame.is_empty():
        summed = frame.group_by([*keys, "in_window", "bucket"]).agg(pl.col("requests").sum())
        for row in summed.to_dicts():
            window, baseline = groups.setdefault(tuple(row[k] for k in keys), ({}, {}))
            (window if row["in_window"] else baseline)[row["bucket"]] = int(row["requests"])
    if not keys:
        groups.setdefault((), ({}, {}))
    q, bq = float(params["percentile"]), float(params["baseline_percentile"])
    min_requests = int(params["min_requests"])
    out = []
    for group, (window, baseline) in groups.items():
        row = dict(zip(keys, group, strict=True))
        n, nb = sum(window.values()), sum(baseline.values())
        label = where(rule, row)
        if n < min_requests or nb < min_requests:
            out.append(
                observation(
                    rule,
                    row,
                    None,
                    f"{label}: {n} requests in the last {duration(rule.window_s)}, {nb} in its "
                    f"baseline (needs {min_requests} each)",
                )
            )
            continue
        now, normal = _bucket_quantile(window, q), _bucket_quantile(baseline, bq)
        assert now is not None and normal is not None  # both sides have requests
        ratio = now / normal
        out.append(
            observation(
                rule,
                row,
                ratio,
                f"{label} prompt p{100 * q:g} {now:,.0f} tokens vs its normal p{100 * bq:g} "
                f"{normal:,.0f} over the last {duration(rule.window_s)} ({n:,} requests)",
            )
        )
    return out


# ---------------------------------------------------------------------------- request shares
_REQUEST_SUMS = ("requests", "failed_or_retried", "cache_requests")
_REQUEST_TOKENS = ("cache_queried_tokens", "cache_hit_tokens")


def _request_groups(
    storage: Storage,
    rule: AlertRule,
    at: datetime,
    baseline_s: float,
    cache: SignalCache,
) -> list[dict[str, Any]]:
    frame = _windowed(storage, "signal_requests", at, rule.window_s, baseline_s, cache)
    frame = in_scope(frame, rule.scope)
    aggs = []
    for column in (*_REQUEST_SUMS, *_REQUEST_TOKENS, "unpriced"):
        aggs.append(pl.col(column).filter(W).sum().alias(f"{column}_w"))
        aggs.append(pl.col(column).filter(B).sum().alias(f"{column}_b"))
    return grouped(frame, tuple(rule.group_by), aggs)


def failure_rate(
    storage: Storage, rule: AlertRule, params: dict[str, Any], at: datetime, cache: SignalCache
) -> list[Observation]:
    """Percentage points of failed or retried attempts above the group's baseline share."""
    rows = _request_groups(storage, rule, at, float(params["baseline_days"]) * 86400, cache)
    min_requests = int(params["min_requests"])
    out = []
    for row in rows:
        n, bad = int(row["requests_w"] or 0), int(row["failed_or_retried_w"] or 0)
        nb, bad_b = int(row["requests_b"] or 0), int(row["failed_or_retried_b"] or 0)
        label = where(rule, row)
        if n < min_requests:
            out.append(
                observation(
                    rule,
                    row,
                    None,
                    f"{label}: {n} requests in the last {duration(rule.window_s)} "
                    f"(needs {min_requests})",
                )
            )
            continue
        rate = bad / n
        # too little history to trust: compared with 0 (a new route failing is news)
        base = bad_b / nb if nb >= min_requests else 0.0
        base_text = f"its normal {pct(base)}" if nb >= min_requests else "no baseline yet"
        out.append(
            observation(
                rule,
                row,
                100 * (rate - base),
                f"{label}: {pct(rate)} of attempts failed or were retries over the last "
                f"{duration(rule.window_s)} ({bad:,} of {n:,}) vs {base_text}",
            )
        )
    return out


def prefix_cache_regression(
    storage: Storage, rule: AlertRule, params: dict[str, Any], at: datetime, cache: SignalCache
) -> list[Observation]:
    """Percentage points the prefix-cache hit rate fell below the group's baseline."""
    rows = _request_groups(storage, rule, at, float(params["baseline_days"]) * 86400, cache)
    min_requests = int(params["min_requests"])
    out = []
    for row in rows:
        n, nb = int(row["cache_requests_w"] or 0), int(row["cache_requests_b"] or 0)
        q, qb = float(row["cache_queried_tokens_w"] or 0), float(row["cache_queried_tokens_b"] or 0)
        label = where(rule, row)
        if n < min_requests or nb < min_requests or q <= 0 or qb <= 0:
            out.append(
                observation(
                    rule,
                    row,
                    None,
                    f"{label}: {n} requests with a prefix-cache count in the last "
                    f"{duration(rule.window_s)}, {nb} in its baseline (needs {min_requests} each)",
                )
            )
            continue
        rate = float(row["cache_hit_tokens_w"] or 0) / q
        base = float(row["cache_hit_tokens_b"] or 0) / qb
        out.append(
            observation(
                rule,
                row,
                100 * (base - rate),
                f"{label} prefix-cache hit rate {pct(rate)} over the last "
                f"{duration(rule.window_s)} vs its normal {pct(base)}",
            )
        )
    return out


def unpriced_usage(
    storage: Storage, rule: AlertRule, params: dict[str, Any], at: datetime, cache: SignalCache
) -> list[Observation]:
    """Requests in the window that could not be costed."""
    rows = _request_groups(storage, rule, at, 0.0, cache)
    out = []
    for row in rows:
        n, unpriced = int(row["requests_w"] or 0), int(row["unpriced_w"] or 0)
        if n == 0:
            out.append(observation(rule, row, None, f"{where(rule, row)}: no requests"))
            continue
        out.append(
            observation(
                rule,
                row,
                unpriced,
                f"{where(rule, row)}: {unpriced:,} of {n:,} requests in the last "
                f"{duration(rule.window_s)} have no price (see Prices)",
            )
        )
    return out


# ---------------------------------------------------------------------------- slo_burn
def slo_burn(
    storage: Storage, rule: AlertRule, params: dict[str, Any], at: datetime, cache: SignalCache
) -> list[Observation]:
    """Multi-window burn rate of the latency objectives: min(long, short), the worst objective."""
    short_s = float(params["short_window_s"] or rule.window_s / 12)
    short_s = min(short_s, float(rule.window_s))
    frame = aggregate(
        storage,
        "signal_slo_burn",
        {
            "window_start": at - timedelta(seconds=rule.window_s),
            "short_start": at - timedelta(seconds=short_s),
            "end": at,
        },
        cache,
    )
    frame = in_scope(frame, rule.scope)
    if params["objective"] is not None:
        frame = frame.filter(pl.col("objective") == params["objective"])
    keys = list(rule.group_by)
    objective_cols = ["objective", "stage", "percentile", "target_s"]
    per_objective: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    if not frame.is_empty():
        summed = frame.group_by([*keys, *objective_cols]).agg(
            pl.col("requests").sum().alias("n"),
            pl.col("bad").sum().alias("bad"),
            pl.col("requests").filter(pl.col("in_short")).sum().alias("n_short"),
            pl.col("bad").filter(pl.col("in_short")).sum().alias("bad_short"),
        )
        for row in summed.to_dicts():
            per_objective.setdefault(tuple(row[k] for k in keys), []).append(row)
    if not keys:
        per_objective.setdefault((), [])
    min_requests = int(params["min_requests"])
    out = []
    for group, objectives in per_objective.items():
        row = dict(zip(keys, group, strict=True))
        label = where(rule, row)
        worst: tuple[float, str] | None = None
        for o in objectives:
            n, n_short = int(o["n"] or 0), int(o["n_short"] or 0)
            if n < min_requests:
                continue
            budget = max(1.0 - float(o["percentile"]), MIN_ERROR_BUDGET)
            long_burn = int(o["bad"] or 0) / n / budget
            short_burn = int(o["bad_short"] or 0) / n_short / budget if n_short else 0.0
            burn = min(long_burn, short_burn)
            text = (
                f"{label} burns its {o['objective']} error budget ({o['stage']} "
                f"p{100 * float(o['percentile']):g} <= {float(o['target_s']):g} s) "
                f"{burn:.1f}x: {long_burn:.1f}x over the last {duration(rule.window_s)} "
                f"({int(o['bad'] or 0):,} of {n:,} over target), {short_burn:.1f}x over the "
                f"last {duration(short_s)}"
            )
            if worst is None or burn > worst[0]:
                worst = (burn, text)
        if worst is None:
            out.append(
                observation(
                    rule,
                    row,
                    None,
                    f"{label}: no latency objective with {min_requests}+ requests in the last "
                    f"{duration(rule.window_s)}",
                )
            )
        else:
            out.append(observation(rule, row, worst[0], worst[1]))
    return out


# ---------------------------------------------------------------------------- false_economy
def false_economy(
    storage: Storage, rule: AlertRule, params: dict[str, Any], at: datetime, cache: SignalCache
) -> list[Observation]:
    """% rise of cost per accepted outcome, the window against the one before it, where cost
    per request or per token fell by at least min_unit_cost_drop %; 0 where it did not."""
    frame = _windowed(storage, "signal_tasks", at, rule.window_s, float(rule.window_s), cache)
    frame = in_scope(frame, rule.scope)
    aggs = []
    for column in (
        "tasks",
        "decided",
        "accepted",
        "decided_cost",
        "llm_cost",
        "llm_calls",
        "tokens",
    ):
        aggs.append(pl.col(column).filter(W).sum().alias(f"{column}_w"))
        aggs.append(pl.col(column).filter(B).sum().alias(f"{column}_b"))
    min_tasks = int(params["min_tasks"])
    drop = float(params["min_unit_cost_drop"]) / 100
    out = []
    for row in grouped(frame, tuple(rule.group_by), aggs):
        label = where(rule, row)
        d, db = int(row["decided_w"] or 0), int(row["decided_b"] or 0)
        a, ab = int(row["accepted_w"] or 0), int(row["accepted_b"] or 0)
        if d < min_tasks or db < min_tasks or ab == 0:
            out.append(
                observation(
                    rule,
                    row,
                    None,
                    f"{label}: {d} decided tasks in the last {duration(rule.window_s)}, {db} in "
                    f"the {duration(rule.window_s)} before (needs {min_tasks} each)",
                )
            )
            continue
        per_request = _ratio(row["llm_cost_w"], row["llm_calls_w"])
        per_request_b = _ratio(row["llm_cost_b"], row["llm_calls_b"])
        per_token = _ratio(row["llm_cost_w"], row["tokens_w"])
        per_token_b = _ratio(row["llm_cost_b"], row["tokens_b"])
        request_fell = _fell(per_request, per_request_b, drop)
        token_fell = _fell(per_token, per_token_b, drop)
        # no accepted task in the window: counted as one, a lower bound on the rise
        cpa = float(row["decided_cost_w"] or 0) / max(a, 1)
        cpa_b = float(row["decided_cost_b"] or 0) / ab
        rise = 100 * (cpa / cpa_b - 1) if cpa_b > 0 else 0.0
        if not (request_fell or token_fell):
            out.append(
                observation(
                    rule,
                    row,
                    0.0,
                    f"{label}: unit cost did not fall over the last {duration(rule.window_s)} "
                    f"(cost per accepted outcome {rise:+.0f} %)",
                )
            )
            continue
        unit, before, after = (
            ("request", per_request_b, per_request)
            if request_fell
            else ("1M tokens", (per_token_b or 0) * 1e6, (per_token or 0) * 1e6)
        )
        out.append(
            observation(
                rule,
                row,
                max(rise, 0.0),
                f"{label}: cost per {unit} fell ${before:,.5f} -> ${after:,.5f} and cost per "
                f"accepted outcome {'rose' if rise > 0 else 'changed'} {rise:+.0f} % "
                f"(${cpa_b:,.4f} -> ${cpa:,.4f}; "
                f"{a}/{d} accepted vs {ab}/{db}) over the last {duration(rule.window_s)}",
            )
        )
    return out


def _ratio(num: Any, den: Any) -> float | None:
    return float(num) / float(den) if num is not None and den else None


def _fell(after: float | None, before: float | None, drop: float) -> bool:
    return after is not None and before is not None and before > 0 and after <= before * (1 - drop)
