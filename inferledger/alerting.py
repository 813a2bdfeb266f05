"""Alerting inside `inferledger serve` (issue #12): the evaluation job and the notification
dispatcher, wired onto the Service's scheduler (inferledger/server.py).

- Evaluation (ledger/alert_engine.py) runs every ``alerts.interval_s`` and right after each
  successful ledger refresh, so the latency from data to notification is one refresh interval
  plus the refresh plus one evaluation, not two intervals. It never runs twice at once: a
  request that arrives while one runs makes that one run once more when it finishes.
- The dispatcher sends the outbox's due notifications (ledger/outbox.py) through their channels
  (inferledger.core.notify) and marks each one afterwards. Every channel has its own worker, and
  a channel with a batch still in flight gets no new one, so a slow or failing channel never
  delays evaluation or another channel. It runs every :data:`DISPATCH_INTERVAL_S` and right
  after each evaluation.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from datetime import UTC, datetime
from typing import Any

from inferledger.core.notify import DeliveryResult, send
from inferledger.core.storage import Storage
from ledger.alert_engine import AlertEngine, EvalSummary
from ledger.alert_rules import list_channels
from ledger.outbox import Notification, due_notifications, mark_failed, mark_retry, mark_sent
from models.alert_config import Channel

log = logging.getLogger(__name__)

DISPATCH_INTERVAL_S = 2.0
SEND_TIMEOUT_S = 10.0

Sender = Callable[..., DeliveryResult]


def stored_channels(storage: Storage) -> Callable[[], Mapping[str, Channel]]:
    """The live (non-archived) channels by name, read at each dispatch."""

    def load() -> Mapping[str, Channel]:
        return {c.name: c for c in list_channels(storage) if c.archived_at is None}

    return load


class Dispatcher:
    """Sends due notifications, one worker per channel, and marks each after the attempt."""

    def __init__(
        self,
        storage: Storage,
        *,
        channels: Callable[[], Mapping[str, Channel]] | None = None,
        clock: Callable[[], datetime] | None = None,
        timeout_s: float = SEND_TIMEOUT_S,
        sender: Sender = send,
        batch: int = 50,
    ) -> None:
        self.storage = storage
        self._channels = channels or stored_channels(storage)
        self.clock = clock or (lambda: datetime.now(UTC))
        self.timeout_s = timeout_s
        self._send = sender
        self.batch = batch
        self._pools: dict[str, ThreadPoolExecutor] = {}
        self._inflight: dict[str, Future[None]] = {}
        self._lock = threading.Lock()
        self._closed = False

    def run_once(self, now: datetime | None = None, *, wait: bool = False) -> int:
        """Hand every due notification to its channel's worker; returns how many were handed
        over. A channel whose previous batch is still running is skipped this time. With
        `wait`, returns after the batches handed over now are done (tests, benches)."""
        if self._closed:
            return 0
        now = now or self.clock()
        due = due_notifications(self.storage, now, limit=self.batch * 4)
        if not due:
            return 0
        try:
            channels = self._channels()
        except Exception:
            log.exception("alert channels could not be read; delivery retried next run")
            return 0
        by_channel: dict[str, list[Notification]] = {}
        for n in due:
            by_channel.setdefault(n.channel, []).append(n)
        started: list[Future[None]] = []
        handed = 0
        with self._lock:
            for name, items in by_channel.items():
                running = self._inflight.get(name)
                if running is not None and not running.done():
                    continue
                pool = self._pools.get(name)
                if pool is None:
                    pool = ThreadPoolExecutor(1, thread_name_prefix=f"notify-{name}"[:40])
                    self._pools[name] = pool
                future = pool.submit(self._deliver, channels.get(name), name, items[: self.batch])
                self._inflight[name] = future
                started.append(future)
                handed += len(items[: self.batch])
        if wait:
            wait_futures(started)
        return handed

    def _deliver(self, channel: Channel | None, name: str, items: list[Notification]) -> None:
        for n in items:
            try:
                if channel is None:
                    mark_failed(
                        self.storage,
                        n.notification_id,
                        self.clock(),
                        f"channel {name!r} does not exist or is archived",
                    )
                    continue
                result = self._send(
                    channel.kind,
                    channel.config,
                    n.payload,
                    idempotency_key=n.idempotency_key,
                    timeout_s=float(channel.config.get("timeout_s") or self.timeout_s),
                )
                at = self.clock()
                if result.ok:
                    mark_sent(self.storage, n.notification_id, at, result)
                else:
                    state = mark_retry(self.storage, n.notification_id, at, result)
                    log.warning(
                        "notification %s via %s failed (%s)%s",
                        n.idempotency_key,
                        name,
                        result.error,
                        "; giving up" if state == "failed" else "; will retry",
                    )
            except Exception:
                # The row stays pending and is tried again next run (same idempotency key).
                log.exception("delivering notification %s failed", n.idempotency_key)

    def close(self, timeout_s: float = SEND_TIMEOUT_S + 5) -> None:
        """Stop handing out work; let each channel finish the attempt in flight."""
        self._closed = True
        with self._lock:
            futures = list(self._inflight.values())
            pools = list(self._pools.values())
        wait_futures(futures, timeout=timeout_s)
        for pool in pools:
            pool.shutdown(wait=False, cancel_futures=True)


class Alerting:
    """The evaluation and delivery jobs of one Service."""

    def __init__(
        self,
        storage: Storage,
        settings: Any,
        *,
        engine: AlertEngine | None = None,
        dispatcher: Dispatcher | None = None,
    ) -> None:
        self.storage = storage
        self.interval_s = int(settings["alerts.interval_s"])
        base_url = settings["auth.public_url"] or _local_url(settings)
        self.engine = engine or AlertEngine(
            storage,
            base_url=base_url,
            interval_s=self.interval_s or 60,
            catch_up_s=settings["alerts.catch_up_s"],
        )
        self.dispatcher = dispatcher or Dispatcher(storage)
        self._run_lock = threading.Lock()
        self._again = threading.Event()
        self.last_summary: EvalSummary | None = None

    @property
    def enabled(self) -> bool:
        return self.interval_s > 0

    def schedule(self, scheduler: Any) -> None:
        """Add the evaluation (every interval, the first at once: a restarted server catches
        up) and the dispatcher (every few seconds) to an APScheduler scheduler."""
        if not self.enabled:
            return
        scheduler.add_job(
            self.evaluate,
            "interval",
            seconds=self.interval_s,
            id="alerts-evaluate",
            next_run_time=datetime.now(UTC),
        )
        scheduler.add_job(
            self.dispatch,
            "interval",
            seconds=DISPATCH_INTERVAL_S,
            id="alerts-dispatch",
            next_run_time=datetime.now(UTC),
        )

    def evaluate(self) -> None:
        """One evaluation now, then a dispatch. If one is already running, it runs again when
        it is done (the data it read may predate the refresh that asked for this one)."""
        if not self.enabled:
            return
        if not self._run_lock.acquire(blocking=False):
            self._again.set()
            return
        try:
            while True:
                self._again.clear()
                try:
                    summary = self.engine.evaluate()
                    self.last_summary = summary
                    if summary.errors:
                        log.warning("alert evaluation: %d rule(s) failed", len(summary.errors))
                except Exception:
                    log.exception("alert evaluation failed; the next run retries")
                self.dispatch()
                if not self._again.is_set():
                    break
        finally:
            self._run_lock.release()

    def dispatch(self) -> None:
        if not self.enabled:
            return
        try:
            self.dispatcher.run_once()
        except Exception:
            log.exception("notification dispatch failed; the next run retries")

    def close(self) -> None:
        self.dispatcher.close()


def _local_url(settings: Any) -> str:
    host = settings["host"]
    host = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    return f"http://{host}:{settings['port']}"
