"""The alert kinds read from the serving fleet's scrapes (issue #12; values defined in
docs/alert-kinds.md): kv_pressure (vLLM's KV cache full with requests waiting, or preemptions)
and coverage_gap (replica time not scraped, or a target down). Their data carries a deployment
and a replica (the scrape target): a rule scopes and groups by deployment, and each group's
value is its worst replica's or target's, named in the summary.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from ledger.alert_signals_base import SignalCache, aggregate, duration, in_scope, observation, where
from models.alert_config import AlertRule

if TYPE_CHECKING:
    from inferledger.core.storage import Storage
    from models.alert_lifecycle import Observation


def _worst_by_group(
    rule: AlertRule, scored: list[tuple[str | None, float, str]]
) -> dict[tuple[Any, ...], tuple[float, str]]:
    """(deployment, value, detail) per replica or target -> the worst per group."""
    out: dict[tuple[Any, ...], tuple[float, str]] = {}
    for deployment, value, detail in scored:
        group = (deployment,) if rule.group_by else ()
        if group not in out or value > out[group][0]:
            out[group] = (value, detail)
    return out


def kv_pressure(
    storage: Storage, rule: AlertRule, params: dict[str, Any], at: datetime, cache: SignalCache
) -> list[Observation]:
    """% of the window's scrape instants with KV usage >= occupancy and a request waiting; 100
    where preemptions rose by >= preemptions in the window."""
    occupancy = float(params["occupancy"])
    frame = aggregate(
        storage,
        "signal_kv_pressure",
        {"start": at - timedelta(seconds=rule.window_s), "end": at, "occupancy": occupancy},
        cache,
    )
    frame = in_scope(frame, rule.scope)
    scored = []
    for r in frame.to_dicts():
        instants, pressed = int(r["instants"]), int(r["pressed"])
        preempted = float(r["preemptions"] or 0)
        share = 100 * pressed / instants
        value = 100.0 if preempted >= int(params["preemptions"]) else share
        detail = (
            f"replica {r['target']}: KV cache >= {100 * occupancy:g} % with requests waiting at "
            f"{pressed} of {instants} scrapes ({share:.0f} %), peak "
            f"{100 * (r['kv_usage_max'] or 0):.1f} %, "
            f"{preempted:g} preemptions over the last {duration(rule.window_s)}"
        )
        scored.append((r["deployment"], value, detail))
    return _observations(rule, scored, "no KV-cache samples")


def coverage_gap(
    storage: Storage, rule: AlertRule, params: dict[str, Any], at: datetime, cache: SignalCache
) -> list[Observation]:
    """% of expected replica-seconds not scraped in the hours the window touches; 100 for a
    deployment with a target whose last down_scrapes scrapes in the window all failed."""
    start = at - timedelta(seconds=rule.window_s)
    down_n = int(params["down_scrapes"])
    coverage = in_scope(
        aggregate(storage, "signal_coverage", {"start": start, "end": at}, cache), rule.scope
    )
    targets = in_scope(
        aggregate(
            storage,
            "signal_targets_down",
            {"start": start, "end": at, "down_scrapes": down_n},
            cache,
        ),
        rule.scope,
    )
    scored = []
    for r in coverage.to_dicts():
        expected, scraped = float(r["expected_s"] or 0), float(r["scraped_s"] or 0)
        if expected <= 0:
            continue
        # rounded: sums of seconds leave float dust (1e-13 %) where nothing is missing
        gap = max(0.0, round(100 * (1 - scraped / expected), 6))
        scored.append(
            (
                r["deployment"],
                gap,
                f"{gap:.1f} % of {expected:,.0f} expected replica-seconds not scraped in "
                f"the hours the last {duration(rule.window_s)} touch",
            )
        )
    for r in targets.to_dicts():
        if int(r["scrapes"]) >= down_n and int(r["failed"]) == int(r["scrapes"]):
            scored.append(
                (
                    r["deployment"],
                    100.0,
                    f"target {r['target']} is down: its last {down_n} scrapes failed "
                    f"({r['last_error'] or 'no answer'})",
                )
            )
        else:
            scored.append((r["deployment"], 0.0, f"target {r['target']} is up"))
    return _observations(rule, scored, "no replicas expected or scraped")


def _observations(
    rule: AlertRule, scored: list[tuple[str | None, float, str]], nothing: str
) -> list[Observation]:
    worst = _worst_by_group(rule, scored)
    if not rule.group_by and () not in worst:
        return [observation(rule, {}, None, f"{where(rule, {})}: {nothing}")]
    out = []
    for group, (value, detail) in sorted(worst.items(), key=lambda kv: str(kv[0])):
        row = {"deployment": group[0]} if group else {}
        out.append(observation(rule, row, value, f"{where(rule, row)}: {detail}"))
    return out
