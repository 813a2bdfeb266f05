"""The notification outbox and the delivery log (issue #12; migration 0016).

A notification is written to ``notification_outbox`` in the same transaction as the alert
transition that causes it (ledger/alert_engine.py), before any attempt to send it. The
dispatcher (inferledger/alerting.py) reads the due ones (:func:`due_notifications`), sends each
(inferledger.core.notify), and marks it afterwards: :func:`mark_sent` or :func:`mark_retry`,
each writing its ``delivery_log`` row in the same transaction. A crash between the send and
the mark leaves the row pending, so it is sent again after the restart with the same
idempotency key: delivery is at least once, and a receiver drops repeats by the key.

Retries back off exponentially (:data:`BACKOFF_BASE_S` × 2^(attempts−1), capped at
:data:`BACKOFF_MAX_S`); after :data:`MAX_ATTEMPTS` attempts or :data:`MAX_AGE_S` since it was
recorded, a notification is marked failed and stays in the log.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa

from inferledger.core.notify import DeliveryResult, send
from inferledger.core.storage import Storage, Transaction
from inferledger.core.times import as_utc
from ledger.schema import alert_events, notification_outbox
from ledger.schema import delivery_log as delivery_log_table
from models.alert_config import Channel

BACKOFF_BASE_S = 10.0
BACKOFF_MAX_S = 3600.0
MAX_ATTEMPTS = 10
MAX_AGE_S = 24 * 3600.0


@dataclass(frozen=True)
class Notification:
    """One outbox row."""

    notification_id: int
    idempotency_key: str
    alert_id: int | None
    channel: str
    event: str
    payload: dict[str, Any]
    created_at: datetime
    state: str
    attempts: int
    next_attempt_at: datetime
    sent_at: datetime | None
    last_error: str | None


@dataclass(frozen=True)
class Delivery:
    """One delivery_log row (notification_id None: a "send test")."""

    delivery_id: int
    notification_id: int | None
    channel: str
    attempted_at: datetime
    ok: bool
    status_code: int | None
    error: str | None
    duration_s: float


def backoff_s(attempts: int) -> float:
    """Seconds to wait after the `attempts`-th failed attempt (1-based)."""
    return min(BACKOFF_MAX_S, BACKOFF_BASE_S * 2 ** max(0, attempts - 1))


def outbox_row(
    *,
    idempotency_key: str,
    alert_id: int | None,
    channel: str,
    event: str,
    payload: Mapping[str, Any],
    created_at: datetime,
) -> dict[str, Any]:
    """The values of a new pending outbox row (the engine inserts it in its transaction)."""
    return {
        "idempotency_key": idempotency_key,
        "alert_id": alert_id,
        "channel": channel,
        "event": event,
        "payload": json.dumps(payload, sort_keys=True, default=str),
        "created_at": created_at,
        "state": "pending",
        "attempts": 0,
        "next_attempt_at": created_at,
    }


_COLUMNS = (
    notification_outbox.c.notification_id,
    notification_outbox.c.idempotency_key,
    notification_outbox.c.alert_id,
    notification_outbox.c.channel,
    notification_outbox.c.event,
    notification_outbox.c.payload,
    notification_outbox.c.created_at,
    notification_outbox.c.state,
    notification_outbox.c.attempts,
    notification_outbox.c.next_attempt_at,
    notification_outbox.c.sent_at,
    notification_outbox.c.last_error,
)


def _notification(row: tuple[Any, ...]) -> Notification:
    return Notification(
        notification_id=int(row[0]),
        idempotency_key=row[1],
        alert_id=None if row[2] is None else int(row[2]),
        channel=row[3],
        event=row[4],
        payload=json.loads(row[5]),
        created_at=as_utc(row[6]),
        state=row[7],
        attempts=int(row[8]),
        next_attempt_at=as_utc(row[9]),
        sent_at=as_utc(row[10]) if row[10] is not None else None,
        last_error=row[11],
    )


def due_notifications(storage: Storage, now: datetime, limit: int = 100) -> list[Notification]:
    """Pending notifications whose next attempt is due, oldest first."""
    stmt = (
        sa.select(*_COLUMNS)
        .where(notification_outbox.c.state == "pending")
        .where(notification_outbox.c.next_attempt_at <= now)
        .order_by(notification_outbox.c.next_attempt_at, notification_outbox.c.notification_id)
        .limit(limit)
    )
    return [_notification(r) for r in storage.select(stmt)]


def notifications(
    storage: Storage,
    *,
    alert_id: int | None = None,
    state: str | None = None,
    limit: int = 200,
) -> list[Notification]:
    """Outbox rows, newest first (the alerts page, tests)."""
    stmt = sa.select(*_COLUMNS)
    if alert_id is not None:
        stmt = stmt.where(notification_outbox.c.alert_id == alert_id)
    if state is not None:
        stmt = stmt.where(notification_outbox.c.state == state)
    stmt = stmt.order_by(notification_outbox.c.notification_id.desc()).limit(limit)
    return [_notification(r) for r in storage.select(stmt)]


def mark_sent(storage: Storage, notification_id: int, at: datetime, result: DeliveryResult) -> bool:
    """The channel accepted it: state sent, one more attempt, its delivery_log row, and a
    'notified' event on its alert, in one transaction. False if it was no longer pending."""

    def op(tx: Transaction) -> bool:
        row = _pending(tx, notification_id)
        if row is None:
            return False
        tx.run(
            sa.update(notification_outbox)
            .where(notification_outbox.c.notification_id == notification_id)
            .values(state="sent", sent_at=at, attempts=row.attempts + 1, last_error=None)
        )
        _log(tx, notification_id, row.channel, result, at)
        if row.alert_id is not None:
            tx.run(
                sa.insert(alert_events).values(
                    alert_id=row.alert_id,
                    event_at=at,
                    event="notified",
                    actor="dispatcher",
                    detail=json.dumps(
                        {"channel": row.channel, "event": row.event, "key": row.idempotency_key}
                    ),
                )
            )
        return True

    return storage.write(op)


def mark_retry(
    storage: Storage,
    notification_id: int,
    at: datetime,
    result: DeliveryResult,
    *,
    max_attempts: int = MAX_ATTEMPTS,
    max_age_s: float = MAX_AGE_S,
) -> str | None:
    """The attempt failed: one more attempt and its delivery_log row; the next attempt after
    :func:`backoff_s`, or state failed after `max_attempts` or `max_age_s`. Returns the new
    state ('pending' or 'failed'), None if it was no longer pending."""

    def op(tx: Transaction) -> str | None:
        row = _pending(tx, notification_id)
        if row is None:
            return None
        attempts = row.attempts + 1
        too_old = (at - row.created_at).total_seconds() >= max_age_s
        state = "failed" if attempts >= max_attempts or too_old else "pending"
        tx.run(
            sa.update(notification_outbox)
            .where(notification_outbox.c.notification_id == notification_id)
            .values(
                state=state,
                attempts=attempts,
                last_error=result.error or "failed",
                next_attempt_at=at + timedelta(seconds=backoff_s(attempts)),
            )
        )
        _log(tx, notification_id, row.channel, result, at)
        return state

    return storage.write(op)


def mark_failed(storage: Storage, notification_id: int, at: datetime, error: str) -> bool:
    """Give up at once (e.g. the channel no longer exists); logged like an attempt."""
    result = DeliveryResult(ok=False, error=error)
    return mark_retry(storage, notification_id, at, result, max_attempts=0) == "failed"


def record_delivery(
    storage: Storage,
    *,
    notification_id: int | None,
    channel: str,
    result: DeliveryResult,
    attempted_at: datetime,
) -> None:
    """A delivery_log row on its own (a "send test": notification_id None)."""
    storage.write(lambda tx: _log(tx, notification_id, channel, result, attempted_at))


def send_test(
    storage: Storage, channel: Channel, *, by: str, at: datetime | None = None
) -> DeliveryResult:
    """The "send test" button: a test message through `channel` now, not through the outbox
    (no retry), logged in the delivery log with no notification id. Never raises for a
    delivery failure: the result says what went wrong."""
    when = at or datetime.now(UTC)
    key = f"test:{channel.name}:{int(when.timestamp())}"
    message = {
        "event": "test",
        "rule": "InferLedger test notification",
        "severity": "info",
        "summary": f"a test of channel {channel.name!r}, sent by {by}",
        "at": when.isoformat(),
        "owner": by,
    }
    timeout = float(channel.config.get("timeout_s") or 10.0)
    result = send(channel.kind, channel.config, message, idempotency_key=key, timeout_s=timeout)
    record_delivery(
        storage, notification_id=None, channel=channel.name, result=result, attempted_at=when
    )
    return result


def delivery_log(
    storage: Storage, *, limit: int = 100, channel: str | None = None
) -> list[Delivery]:
    """The latest delivery attempts, newest first."""
    t = delivery_log_table
    stmt = sa.select(
        t.c.delivery_id,
        t.c.notification_id,
        t.c.channel,
        t.c.attempted_at,
        t.c.ok,
        t.c.status_code,
        t.c.error,
        t.c.duration_s,
    )
    if channel is not None:
        stmt = stmt.where(t.c.channel == channel)
    stmt = stmt.order_by(t.c.delivery_id.desc()).limit(limit)
    return [
        Delivery(
            delivery_id=int(r[0]),
            notification_id=None if r[1] is None else int(r[1]),
            channel=r[2],
            attempted_at=as_utc(r[3]),
            ok=bool(r[4]),
            status_code=r[5],
            error=r[6],
            duration_s=float(r[7]),
        )
        for r in storage.select(stmt)
    ]


# ---------------------------------------------------------------- helpers


def _pending(tx: Transaction, notification_id: int) -> Notification | None:
    row = tx.run(
        sa.select(*_COLUMNS).where(notification_outbox.c.notification_id == notification_id)
    ).fetchone()
    if row is None:
        return None
    found = _notification(row)
    return found if found.state == "pending" else None


def _log(
    tx: Transaction,
    notification_id: int | None,
    channel: str,
    result: DeliveryResult,
    at: datetime,
) -> None:
    tx.run(
        sa.insert(delivery_log_table).values(
            notification_id=notification_id,
            channel=channel,
            attempted_at=at,
            ok=result.ok,
            status_code=result.status_code,
            error=result.error,
            duration_s=max(0.0, float(result.duration_s)),
        )
    )
