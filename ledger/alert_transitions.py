"""One alert rule at one instant, inside the write transaction (issue #12): the open alerts
are read, the lifecycle (models.alert_lifecycle) moves them, and the alert rows, the open-alert
index, the history events, the outbox rows (one per channel of each notification) and the
rule's cursor are written, all or nothing. ledger/alert_engine.py decides what to evaluate when
and queues these writes; docs/alerts.md describes the message and the idempotency keys.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as upsert

from inferledger.core.storage import Transaction
from inferledger.core.times import as_utc
from ledger.outbox import outbox_row
from ledger.schema import (
    alert_cursor,
    alert_events,
    alert_open,
    alerts,
    notification_outbox,
)
from models.alert_config import BUDGET_KINDS, AlertRule, Budget, parse_scope_key
from models.alert_lifecycle import Observation, OpenAlert, Transition
from models.alert_lifecycle import evaluate as lifecycle_evaluate
from models.dashboard_links import dashboard_link

log = logging.getLogger(__name__)

#: Events that may notify; 'update' only refreshes the alert's values.
_NOTIFYING = ("firing", "escalated", "repeat", "resolved")
#: Which dashboard page shows a kind's alert.
_PAGE_OF_KIND = {
    "budget_threshold": "/budgets",
    "budget_forecast": "/budgets",
    "spend_spike": "/spend",
    "long_context": "/requests",
    "failure_rate": "/requests",
    "slo_burn": "/latency",
    "prefix_cache_regression": "/gpu",
    "kv_pressure": "/gpu",
    "false_economy": "/economics",
    "coverage_gap": "/spend",
    "unpriced_usage": "/spend",
}


@dataclass(frozen=True)
class EngineRule:
    """A rule as the engine evaluates it: its key in alert state, the rule, its budget (the
    budget kinds), and the channels its notifications go to."""

    key: str
    rule: AlertRule
    budget: Budget | None = None

    @property
    def channels(self) -> tuple[str, ...]:
        return tuple(self.rule.channels)


@dataclass
class Applied:
    """What one rule x instant wrote (applied False: the instant was already evaluated)."""

    applied: bool = False
    events: Counter = field(default_factory=Counter)
    notifications: int = 0
    silenced: int = 0


_ALERT_COLUMNS = (
    alerts.c.alert_id,
    alerts.c.scope_key,
    alerts.c.state,
    alerts.c.severity,
    alerts.c.pending_since,
    alerts.c.fired_at,
    alerts.c.clear_since,
    alerts.c.last_notified_at,
    alerts.c.notified_severity,
    alerts.c.value,
    alerts.c.peak_value,
    alerts.c.notifications,
    alerts.c.summary,
    alerts.c.acknowledged_at,
)


def apply_tick(
    tx: Transaction,
    engine_rule: EngineRule,
    observations: list[Observation],
    at: datetime,
    silenced: Callable[[str], bool],
    base_url: str,
) -> Applied:
    """One rule at one instant, inside the write transaction: the open alerts are read here,
    so two evaluations can never apply the same transition twice (the single writer
    serialises them, and the cursor makes a repeated instant a no-op)."""
    key, rule = engine_rule.key, engine_rule.rule
    applied = Applied()
    cursor = tx.run(
        sa.select(alert_cursor.c.evaluated_at).where(alert_cursor.c.rule_key == key)
    ).fetchone()
    if cursor is not None and as_utc(cursor[0]) >= at:
        return applied
    applied.applied = True
    rows = tx.run(
        sa.select(*_ALERT_COLUMNS)
        .select_from(alerts.join(alert_open, alerts.c.alert_id == alert_open.c.alert_id))
        .where(alert_open.c.rule_key == key)
    ).fetchall()
    open_alerts: dict[str, OpenAlert] = {}
    stored: dict[int, tuple[int, datetime | None]] = {}
    for r in rows:
        open_alerts[r[1]] = OpenAlert(
            alert_id=int(r[0]),
            scope_key=r[1],
            state=r[2],
            severity=r[3],
            pending_since=as_utc(r[4]),
            fired_at=_utc_or_none(r[5]),
            clear_since=_utc_or_none(r[6]),
            last_notified_at=_utc_or_none(r[7]),
            notified_severity=r[8],
            value=r[9],
            peak_value=r[10],
            notifications=int(r[11]),
            summary=r[12],
        )
        stored[int(r[0])] = (int(r[11]), _utc_or_none(r[13]))

    asked: dict[str, bool] = {}

    def silenced_once(scope_key: str) -> bool:
        if scope_key not in asked:
            asked[scope_key] = silenced(scope_key)
        return asked[scope_key]

    transitions = lifecycle_evaluate(rule, open_alerts, observations, at, silenced=silenced_once)
    ids: dict[str, int] = {}
    for transition in transitions:
        _apply_transition(
            tx, engine_rule, transition, at, ids, stored, silenced_once, base_url, applied
        )
    tx.run(
        upsert(alert_cursor)
        .values(rule_key=key, evaluated_at=at)
        .on_conflict_do_update(index_elements=[alert_cursor.c.rule_key], set_={"evaluated_at": at})
    )
    return applied


def _apply_transition(
    tx: Transaction,
    engine_rule: EngineRule,
    t: Transition,
    at: datetime,
    ids: dict[str, int],
    stored: dict[int, tuple[int, datetime | None]],
    silenced: Callable[[str], bool],
    base_url: str,
    applied: Applied,
) -> None:
    key, rule = engine_rule.key, engine_rule.rule
    alert = t.alert
    event = t.event
    obs = t.observation
    alert_id = alert.alert_id if alert.alert_id is not None else ids.get(t.scope_key)
    severity = alert.severity or (obs.severity if obs is not None else None) or rule.severity
    threshold = obs.threshold if obs is not None and obs.threshold is not None else rule.threshold
    summary = alert.summary or (obs.summary if obs is not None else "") or ""
    state = alert.state
    labels = {**rule.scope, **parse_scope_key(t.scope_key)}
    if obs is not None and obs.labels:
        labels.update({k: v for k, v in obs.labels.items() if v is not None})
    link = _link(base_url, rule, labels, alert.pending_since or at, at)
    values: dict[str, Any] = {
        "state": state,
        "severity": severity,
        "fired_at": alert.fired_at,
        "clear_since": alert.clear_since,
        "resolved_at": at if event == "resolved" else None,
        "last_evaluated_at": at,
        "value": _finite(alert.value),
        "threshold": _finite(threshold),
        "peak_value": _finite(alert.peak_value),
        "summary": summary,
        "link": link,
    }
    if alert_id is None:
        alert_id = tx.run(
            sa.insert(alerts)
            .values(
                rule_key=key,
                rule_name=rule.name,
                kind=rule.kind,
                scope_key=t.scope_key,
                owner=rule.owner,
                pending_since=alert.pending_since or at,
                notifications=0,
                **values,
            )
            .returning(alerts.c.alert_id)
        ).fetchone()[0]
        # The primary key (rule_key, scope_key) is the "one open alert per rule x scope" rule.
        tx.run(sa.insert(alert_open).values(rule_key=key, scope_key=t.scope_key, alert_id=alert_id))
        stored[alert_id] = (0, None)
    ids[t.scope_key] = alert_id
    notified_before, acknowledged_at = stored.get(alert_id, (0, None))

    # The lifecycle did the notification bookkeeping (count, last time, severity notified).
    values.update(
        last_notified_at=alert.last_notified_at,
        notified_severity=alert.notified_severity,
        notifications=alert.notifications,
    )
    notify = t.notify and event in _NOTIFYING
    if event != "update":
        _event(
            tx,
            alert_id,
            at,
            event,
            {
                "value": _finite(alert.value),
                "threshold": _finite(threshold),
                "severity": severity,
                "summary": summary,
                # the first notification of an alert that fired under a silence, sent when
                # the silence ended
                **({"delayed": True} if _delayed_firing(event, alert, at) else {}),
            },
        )
        applied.events[event] += 1
    if notify and event == "repeat" and acknowledged_at is not None:
        # An acknowledged alert is not repeated (escalation and the resolve still notify);
        # last_notified_at moves on so the next repeat is one repeat_s later.
        values["notifications"] = notified_before
        _event(tx, alert_id, at, "silenced", {"suppressed": event, "by": "acknowledged"})
        applied.silenced += 1
        notify = False
    elif t.silenced:
        # The lifecycle held the notification back for a silence: the history says so.
        _event(tx, alert_id, at, "silenced", {"suppressed": event, "by": "silence"})
        applied.silenced += 1
    if notify:
        n = alert.notifications
        payload = _message(engine_rule, alert_id, event, n, labels, values, alert, at)
        for channel in engine_rule.channels:
            idem = f"{alert_id}:{event}:{n}:{channel}"
            tx.run(
                sa.insert(notification_outbox).values(
                    **outbox_row(
                        idempotency_key=idem,
                        alert_id=alert_id,
                        channel=channel,
                        event=event,
                        payload={**payload, "idempotency_key": idem, "channel": channel},
                        created_at=at,
                    )
                )
            )
            applied.notifications += 1
        if not engine_rule.channels:
            # No channel: the event row is the record; the server log says it too.
            log.info("alert %s %s (no channel): %s", alert_id, event, payload["summary"])
    tx.run(sa.update(alerts).where(alerts.c.alert_id == alert_id).values(**values))
    if event in ("resolved", "cancelled"):
        tx.run(
            sa.delete(alert_open)
            .where(alert_open.c.rule_key == key)
            .where(alert_open.c.scope_key == t.scope_key)
            .where(alert_open.c.alert_id == alert_id)
        )


def _event(
    tx: Transaction, alert_id: int, at: datetime, event: str, detail: Mapping[str, Any]
) -> None:
    tx.run(
        sa.insert(alert_events).values(
            alert_id=alert_id, event_at=at, event=event, detail=json.dumps(detail, default=str)
        )
    )


def _message(
    engine_rule: EngineRule,
    alert_id: int,
    event: str,
    n: int,
    labels: Mapping[str, Any],
    values: Mapping[str, Any],
    alert: OpenAlert,
    at: datetime,
) -> dict[str, Any]:
    """The notification's facts (docs/alerts.md, "The message")."""
    rule = engine_rule.rule
    since = alert.fired_at or alert.pending_since or at
    return {
        "event": event,
        "alert_id": alert_id,
        "notification": n,
        "rule": rule.name,
        "rule_key": engine_rule.key,
        "kind": rule.kind,
        "budget": rule.budget_name,
        "severity": values["severity"],
        "state": values["state"],
        "summary": values["summary"],
        "scope": {k: v for k, v in sorted(labels.items()) if v is not None},
        "value": values["value"],
        "threshold": values["threshold"],
        "peak_value": values["peak_value"],
        "unit": "%" if rule.kind in BUDGET_KINDS else "",
        "since": _iso(since),
        "pending_since": _iso(alert.pending_since),
        "fired_at": _iso(alert.fired_at),
        "resolved_at": _iso(at) if event == "resolved" else None,
        "at": _iso(at),
        "owner": rule.owner,
        "link": values["link"],
    }


def _link(
    base_url: str, rule: AlertRule, labels: Mapping[str, Any], since: datetime, at: datetime
) -> str:
    page = _PAGE_OF_KIND.get(rule.kind, "/alerts")
    start = min(since, at) - timedelta(seconds=max(rule.window_s, 60))
    end = max(at, start + timedelta(minutes=1))
    try:
        return dashboard_link(base_url, page, scope=labels, start=start, end=end)
    except ValueError:
        return f"{base_url.rstrip('/')}/alerts"


def _finite(value: float | None) -> float | None:
    if value is None:
        return None
    v = float(value)
    return v if v == v and v not in (float("inf"), float("-inf")) else None


def _iso(moment: datetime | None) -> str | None:
    return as_utc(moment).isoformat() if moment is not None else None


def _utc_or_none(moment: datetime | None) -> datetime | None:
    return None if moment is None else as_utc(moment)


def _delayed_firing(event: str, alert: OpenAlert, at: datetime) -> bool:
    return event == "firing" and alert.fired_at is not None and alert.fired_at < at
