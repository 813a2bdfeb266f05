"""The notification outbox and the dispatcher against a real loopback webhook (issue #12):
retry with backoff on 500 then 200, the delivery log, failure after the last attempt, and a
slow channel that does not delay another."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

from inferledger.alerting import Dispatcher
from inferledger.core.notify import DeliveryResult
from ledger.outbox import (
    backoff_s,
    delivery_log,
    due_notifications,
    mark_retry,
    notifications,
    outbox_row,
    record_delivery,
)
from ledger.schema import notification_outbox
from models.alert_config import Channel

T0 = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)


def enqueue(storage, key: str, channel: str, at: datetime = T0) -> None:
    row = outbox_row(
        idempotency_key=key,
        alert_id=None,
        channel=channel,
        event="firing",
        payload={"event": "firing", "rule": "r", "summary": key},
        created_at=at,
    )
    storage.write(lambda tx: tx.run(notification_outbox.insert().values(**row)))


class Clock:
    def __init__(self, at: datetime) -> None:
        self.at = at

    def __call__(self) -> datetime:
        return self.at


def test_backoff_doubles_and_is_capped() -> None:
    assert [backoff_s(n) for n in (1, 2, 3, 4)] == [10, 20, 40, 80]
    assert backoff_s(20) == 3600


def test_retry_on_500_then_sent_on_200_with_delivery_log(storage, webhook) -> None:
    hook = webhook([500, 500])
    clock = Clock(T0)
    channels = {"hook": Channel(name="hook", kind="webhook", config={"url": hook.url})}
    dispatcher = Dispatcher(storage, channels=lambda: channels, clock=clock, timeout_s=5)
    enqueue(storage, "1:firing:1:hook", "hook")

    assert dispatcher.run_once(T0, wait=True) == 1  # 500
    [n] = notifications(storage)
    assert (n.state, n.attempts, n.next_attempt_at) == ("pending", 1, T0 + timedelta(seconds=10))
    assert n.last_error.startswith("HTTP 500")
    assert dispatcher.run_once(T0 + timedelta(seconds=9), wait=True) == 0  # not due yet
    clock.at = T0 + timedelta(seconds=10)
    assert dispatcher.run_once(clock.at, wait=True) == 1  # 500 again -> 20 s
    [n] = notifications(storage)
    assert n.next_attempt_at == T0 + timedelta(seconds=30)
    clock.at = T0 + timedelta(seconds=30)
    assert dispatcher.run_once(clock.at, wait=True) == 1  # 200
    [n] = notifications(storage)
    assert (n.state, n.attempts, n.sent_at, n.last_error) == ("sent", 3, clock.at, None)
    assert due_notifications(storage, T0 + timedelta(days=1), 10) == []

    log = delivery_log(storage, limit=10)
    assert [(d.ok, d.status_code) for d in log] == [(True, 200), (False, 500), (False, 500)]
    assert all(d.notification_id == n.notification_id and d.channel == "hook" for d in log)
    # the receiver saw the same idempotency key three times
    assert [h["Idempotency-Key"] for h, _ in hook.received] == ["1:firing:1:hook"] * 3


def test_gives_up_after_max_attempts_or_age(storage) -> None:
    enqueue(storage, "k1", "hook")
    enqueue(storage, "k2", "hook")
    ids = sorted(n.notification_id for n in notifications(storage))
    bad = DeliveryResult(ok=False, status_code=503, error="HTTP 503")
    for i in range(2):
        assert mark_retry(storage, ids[0], T0 + timedelta(seconds=i), bad, max_attempts=3) == (
            "pending"
        )
    assert mark_retry(storage, ids[0], T0 + timedelta(seconds=5), bad, max_attempts=3) == "failed"
    assert mark_retry(storage, ids[0], T0, bad) is None  # no longer pending
    assert mark_retry(storage, ids[1], T0 + timedelta(days=2), bad) == "failed"  # too old
    assert {n.state for n in notifications(storage)} == {"failed"}


def test_unknown_channel_fails_at_once(storage) -> None:
    enqueue(storage, "k", "gone")
    dispatcher = Dispatcher(storage, channels=lambda: {}, clock=Clock(T0))
    dispatcher.run_once(T0, wait=True)
    [n] = notifications(storage)
    assert n.state == "failed" and "'gone' does not exist" in n.last_error
    assert delivery_log(storage, limit=5)[0].error == n.last_error


def test_slow_channel_does_not_delay_another(storage, webhook) -> None:
    slow = webhook(delay_s=3.0)
    fast = webhook()
    channels = {
        "slow": Channel(name="slow", kind="webhook", config={"url": slow.url}),
        "fast": Channel(name="fast", kind="webhook", config={"url": fast.url}),
    }
    dispatcher = Dispatcher(storage, channels=lambda: channels, clock=Clock(T0), timeout_s=1)
    enqueue(storage, "s1", "slow")
    enqueue(storage, "s2", "slow")
    enqueue(storage, "f1", "fast")
    started = time.monotonic()
    dispatcher.run_once(T0)  # returns at once: each channel has its own worker
    assert time.monotonic() - started < 1.0
    deadline = time.monotonic() + 10
    while not fast.received and time.monotonic() < deadline:
        time.sleep(0.02)
    assert fast.received, "the fast channel waited for the slow one"
    assert fast.posts[0].at - started < 1.0
    # a second run while the slow batch is in flight hands the slow channel nothing new
    enqueue(storage, "f2", "fast")
    dispatcher.run_once(T0)
    deadline = time.monotonic() + 10
    while len(fast.received) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert [b["summary"] for _, b in fast.received] == ["f1", "f2"]
    dispatcher.close()
    states = {n.idempotency_key: n for n in notifications(storage)}
    # the slow receiver answers after the 1 s timeout: a clear error, retried later
    assert states["s1"].state == "pending" and "timeout" in states["s1"].last_error
    assert states["f1"].state == "sent" and states["f2"].state == "sent"


def test_send_test_delivery_is_logged_without_notification(storage) -> None:
    record_delivery(
        storage,
        notification_id=None,
        channel="hook",
        result=DeliveryResult(ok=True, status_code=204, duration_s=0.01),
        attempted_at=T0,
    )
    [d] = delivery_log(storage, limit=5, channel="hook")
    assert (d.notification_id, d.ok, d.status_code) == (None, True, 204)
    assert delivery_log(storage, limit=5, channel="other") == []


def test_send_test_button_sends_and_logs(storage, webhook) -> None:
    from ledger.outbox import send_test

    hook = webhook([503])
    channel = Channel(name="hook", kind="webhook", config={"url": hook.url})
    failed = send_test(storage, channel, by="alice", at=T0)
    assert not failed.ok and failed.status_code == 503
    assert send_test(storage, channel, by="alice", at=T0 + timedelta(seconds=1)).ok
    _, body = hook.received[-1]
    assert body["event"] == "test" and "alice" in body["summary"]
    assert [(d.ok, d.status_code, d.notification_id) for d in delivery_log(storage, limit=5)] == [
        (True, 200, None),
        (False, 503, None),
    ]
    assert notifications(storage) == []  # a test never enters the outbox
