"""Alert state and history as the alerts page reads it (issue #12), and acknowledgements.

The rows are written by ledger/alert_engine.py (transitions) and ledger/outbox.py ('notified'
events). An acknowledgement records who took the alert on (``acknowledged_by``/``_at`` and an
``acknowledged`` event); it stops the weekly/daily *repeat* notifications of that alert, never
an escalation or the resolve notification (docs/alerts.md, "Acknowledgements").
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa

from inferledger.core.errors import BadInputError
from inferledger.core.storage import Storage, Transaction
from inferledger.core.times import as_utc
from ledger.schema import alert_events as alert_events_table
from ledger.schema import alert_open, alerts
from models.alert_config import parse_scope_key


@dataclass(frozen=True)
class AlertEvent:
    event_id: int
    alert_id: int
    event_at: datetime
    event: str
    actor: str
    detail: dict[str, Any]


@dataclass(frozen=True)
class AlertRecord:
    """One alert row, with its scope labels and (from :func:`alert_history`) its events."""

    alert_id: int
    rule_key: str
    rule_name: str
    kind: str
    scope_key: str
    scope: dict[str, str | None]
    state: str
    severity: str
    owner: str
    pending_since: datetime
    fired_at: datetime | None
    clear_since: datetime | None
    resolved_at: datetime | None
    last_evaluated_at: datetime
    value: float | None
    threshold: float | None
    peak_value: float | None
    summary: str
    link: str | None
    last_notified_at: datetime | None
    notified_severity: str | None
    notifications: int
    acknowledged_by: str | None
    acknowledged_at: datetime | None
    events: tuple[AlertEvent, ...] = ()

    @property
    def is_open(self) -> bool:
        return self.state in ("pending", "firing")


_COLUMNS = (
    alerts.c.alert_id,
    alerts.c.rule_key,
    alerts.c.rule_name,
    alerts.c.kind,
    alerts.c.scope_key,
    alerts.c.state,
    alerts.c.severity,
    alerts.c.owner,
    alerts.c.pending_since,
    alerts.c.fired_at,
    alerts.c.clear_since,
    alerts.c.resolved_at,
    alerts.c.last_evaluated_at,
    alerts.c.value,
    alerts.c.threshold,
    alerts.c.peak_value,
    alerts.c.summary,
    alerts.c.link,
    alerts.c.last_notified_at,
    alerts.c.notified_severity,
    alerts.c.notifications,
    alerts.c.acknowledged_by,
    alerts.c.acknowledged_at,
)
_SEVERITY_ORDER = sa.case(
    {"critical": 0, "warning": 1, "info": 2}, value=alerts.c.severity, else_=3
)


def _record(row: tuple[Any, ...], events: tuple[AlertEvent, ...] = ()) -> AlertRecord:
    r = list(row)
    return AlertRecord(
        alert_id=int(r[0]),
        rule_key=r[1],
        rule_name=r[2],
        kind=r[3],
        scope_key=r[4],
        scope=parse_scope_key(r[4]),
        state=r[5],
        severity=r[6],
        owner=r[7],
        pending_since=as_utc(r[8]),
        fired_at=_opt(r[9]),
        clear_since=_opt(r[10]),
        resolved_at=_opt(r[11]),
        last_evaluated_at=as_utc(r[12]),
        value=r[13],
        threshold=r[14],
        peak_value=r[15],
        summary=r[16],
        link=r[17],
        last_notified_at=_opt(r[18]),
        notified_severity=r[19],
        notifications=int(r[20]),
        acknowledged_by=r[21],
        acknowledged_at=_opt(r[22]),
        events=events,
    )


def open_alerts(storage: Storage, *, rule_key: str | None = None) -> list[AlertRecord]:
    """The open (pending or firing) alerts, firing first, then by severity, newest first."""
    stmt = sa.select(*_COLUMNS).select_from(
        alerts.join(alert_open, alerts.c.alert_id == alert_open.c.alert_id)
    )
    if rule_key is not None:
        stmt = stmt.where(alert_open.c.rule_key == rule_key)
    stmt = stmt.order_by(
        (alerts.c.state != "firing"), _SEVERITY_ORDER, alerts.c.pending_since.desc()
    )
    return [_record(r) for r in storage.select(stmt)]


def alert_history(
    storage: Storage,
    *,
    offset: int = 0,
    limit: int = 50,
    rule_key: str | None = None,
    state: str | None = None,
) -> list[AlertRecord]:
    """Alerts newest first (by when they started), each with its events, oldest event first:
    the history page, with who acknowledged what."""
    stmt = sa.select(*_COLUMNS)
    if rule_key is not None:
        stmt = stmt.where(alerts.c.rule_key == rule_key)
    if state is not None:
        stmt = stmt.where(alerts.c.state == state)
    stmt = (
        stmt.order_by(alerts.c.pending_since.desc(), alerts.c.alert_id.desc())
        .offset(max(0, offset))
        .limit(max(0, limit))
    )
    rows = storage.select(stmt)
    ids = [int(r[0]) for r in rows]
    by_alert: dict[int, list[AlertEvent]] = {i: [] for i in ids}
    if ids:
        for event in _events(
            storage, sa.select(*_EVENT_COLUMNS).where(alert_events_table.c.alert_id.in_(ids))
        ):
            by_alert[event.alert_id].append(event)
    return [_record(r, tuple(by_alert[int(r[0])])) for r in rows]


def count_alerts(storage: Storage, *, rule_key: str | None = None, state: str | None = None) -> int:
    """How many alerts :func:`alert_history` pages through."""
    stmt = sa.select(sa.func.count()).select_from(alerts)
    if rule_key is not None:
        stmt = stmt.where(alerts.c.rule_key == rule_key)
    if state is not None:
        stmt = stmt.where(alerts.c.state == state)
    return int(storage.select(stmt)[0][0])


def get_alert(storage: Storage, alert_id: int) -> AlertRecord | None:
    """One alert with its events, or None."""
    rows = storage.select(sa.select(*_COLUMNS).where(alerts.c.alert_id == alert_id))
    if not rows:
        return None
    return _record(rows[0], tuple(alert_events(storage, alert_id)))


_EVENT_COLUMNS = (
    alert_events_table.c.event_id,
    alert_events_table.c.alert_id,
    alert_events_table.c.event_at,
    alert_events_table.c.event,
    alert_events_table.c.actor,
    alert_events_table.c.detail,
)


def alert_events(storage: Storage, alert_id: int) -> list[AlertEvent]:
    """One alert's events, oldest first."""
    return _events(
        storage, sa.select(*_EVENT_COLUMNS).where(alert_events_table.c.alert_id == alert_id)
    )


def _events(storage: Storage, stmt: sa.Select) -> list[AlertEvent]:
    stmt = stmt.order_by(alert_events_table.c.event_at, alert_events_table.c.event_id)
    return [
        AlertEvent(
            event_id=int(r[0]),
            alert_id=int(r[1]),
            event_at=as_utc(r[2]),
            event=r[3],
            actor=r[4],
            detail=json.loads(r[5]) if r[5] else {},
        )
        for r in storage.select(stmt)
    ]


def acknowledge(
    storage: Storage, alert_id: int, *, by: str, at: datetime | None = None, note: str = ""
) -> AlertRecord:
    """Record that `by` took alert `alert_id` on. Only an open alert can be acknowledged, and
    once (the first acknowledgement stands; a second is refused with who did it)."""
    if not by or not by.strip():
        raise BadInputError("an acknowledgement needs the name of who acknowledges")
    when = as_utc(at or datetime.now(UTC))

    def op(tx: Transaction) -> None:
        row = tx.run(
            sa.select(alerts.c.state, alerts.c.acknowledged_by).where(alerts.c.alert_id == alert_id)
        ).fetchone()
        if row is None:
            raise BadInputError(f"no alert {alert_id}")
        state, already = row
        if state not in ("pending", "firing"):
            raise BadInputError(f"alert {alert_id} is {state}; only open alerts are acknowledged")
        if already:
            raise BadInputError(f"alert {alert_id} was already acknowledged by {already}")
        tx.run(
            sa.update(alerts)
            .where(alerts.c.alert_id == alert_id)
            .values(acknowledged_by=by, acknowledged_at=when)
        )
        tx.run(
            sa.insert(alert_events_table).values(
                alert_id=alert_id,
                event_at=when,
                event="acknowledged",
                actor=by,
                detail=json.dumps({"note": note}) if note else None,
            )
        )

    storage.write(op)
    found = get_alert(storage, alert_id)
    assert found is not None
    return found


def _opt(moment: datetime | None) -> datetime | None:
    return None if moment is None else as_utc(moment)
