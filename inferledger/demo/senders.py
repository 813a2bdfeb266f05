"""How the demo's data reaches the service, through the paths real data takes.

`SpanSender` POSTs OTLP protobuf to the service's /v1/traces from a few threads, as several
exporters would; `MetricReplayer` stores rendered /metrics pages through
`Scraper.ingest_text` with the scrape's own (historical) timestamp, the parser and writes of a
live scrape. `Feed` is what the history loader and the live feeder share, and builds their
senders.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from inferledger.core.settings import ScrapeTarget
from inferledger.demo.state import DemoError, DemoState

if TYPE_CHECKING:  # heavy imports happen when the demo starts, not when the CLI builds its parser
    from inferledger.server import Service
    from models.workload.segments import Segment, SegmentSource

log = logging.getLogger(__name__)

EXPOSITION = "text/plain; version=0.0.4; charset=utf-8"


class _Workers:
    """A thread pool and the futures it has not finished: what both senders drain and close."""

    def __init__(self, workers: int, name: str, max_pending: int) -> None:
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix=name)
        self._slots = threading.BoundedSemaphore(max_pending)
        self._pending: set[Future[Any]] = set()
        self._lock = threading.Lock()

    def drain(self) -> None:
        """Wait until everything queued is done."""
        while True:
            with self._lock:
                pending = list(self._pending)
            if not pending:
                return
            for f in pending:
                with contextlib.suppress(Exception):
                    f.result()

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


class SpanSender(_Workers):
    """POSTs OTLP protobuf bodies to /v1/traces from a few threads, like several exporters;
    retries a 503 after its Retry-After, as the OTLP exporters do."""

    def __init__(self, url: str, stop: threading.Event, *, workers: int, max_pending: int) -> None:
        import requests  # ~40 ms: not for every CLI command that builds the parser

        super().__init__(workers, "demo-otlp", max_pending)
        self._requests = requests
        self.url = url
        self.stop = stop
        self._local = threading.local()
        self.spans = 0
        self.rejected = 0
        self.error: str | None = None

    def submit(self, body: bytes, spans: int, on_done: Callable[[int], None] | None = None) -> bool:
        """Queue one export request; False when stopping (nothing was queued)."""
        while not self._slots.acquire(timeout=0.2):
            if self.stop.is_set():
                return False
        if self.stop.is_set() or self.error is not None:
            self._slots.release()
            return False
        future = self._pool.submit(self._post, body, spans)
        with self._lock:
            self._pending.add(future)

        def done(f: Future[None]) -> None:
            self._slots.release()
            with self._lock:
                self._pending.discard(f)
            if f.cancelled():  # stopping: never sent
                return
            exc = f.exception()
            if exc is not None and self.error is None:
                self.error = str(exc)
            elif exc is None and on_done is not None:
                on_done(spans)

        future.add_done_callback(done)
        return True

    def _post(self, body: bytes, spans: int) -> None:
        # protobuf's runtime: loaded by the first request, not by the CLI's parser
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceResponse,
        )

        session = getattr(self._local, "session", None)
        if session is None:
            session = self._local.session = self._requests.Session()
            session.trust_env = False  # loopback: never through a proxy from the environment
        delay = 0.5
        broken = 0
        while True:
            try:
                resp = session.post(
                    self.url,
                    data=body,
                    headers={"Content-Type": "application/x-protobuf"},
                    timeout=120,
                )
            except self._requests.ConnectionError:
                if self.stop.is_set():
                    return
                # A kept-alive connection the server closed while idle (the history load waits
                # minutes for a worker's day between bursts) fails the next POST at once. Sending
                # again is safe: a span received twice is stored once.
                broken += 1
                if broken > 3:
                    raise
                session.close()
                session = self._local.session = self._requests.Session()
                session.trust_env = False
                time.sleep(delay * broken)
                continue
            if resp.status_code == 200:
                answer = ExportTraceServiceResponse.FromString(resp.content)
                rejected = answer.partial_success.rejected_spans
                with self._lock:
                    self.spans += spans - rejected
                    self.rejected += rejected
                if rejected:
                    log.warning(
                        "%d span(s) rejected: %s", rejected, answer.partial_success.error_message
                    )
                return
            if resp.status_code == 503 and not self.stop.is_set():
                time.sleep(float(resp.headers.get("Retry-After", delay)))
                continue
            if self.stop.is_set():
                return
            raise DemoError(f"POST /v1/traces answered {resp.status_code}: {resp.text[:200]}")


class MetricReplayer(_Workers):
    """Stores rendered pages through Scraper.ingest_text, a few at a time (parsing one page
    overlaps committing another)."""

    def __init__(self, scraper: Any, stop: threading.Event, *, workers: int) -> None:
        super().__init__(workers, "demo-metrics", workers * 4)
        self.scraper = scraper
        self.stop = stop
        self.samples = 0
        self.scrapes = 0
        self.error: str | None = None

    def submit(
        self,
        target: ScrapeTarget,
        text: str,
        at_unix_s: float,
        on_done: Callable[[int], None] | None = None,
    ) -> bool:
        while not self._slots.acquire(timeout=0.2):
            if self.stop.is_set():
                return False
        if self.stop.is_set():
            self._slots.release()
            return False
        ts = datetime.fromtimestamp(at_unix_s, UTC)
        future = self._pool.submit(self.scraper.ingest_text, target, text, EXPOSITION, ts)
        with self._lock:
            self._pending.add(future)

        def done(f: Future[Any]) -> None:
            self._slots.release()
            with self._lock:
                self._pending.discard(f)
            if f.cancelled():  # stopping: never stored
                return
            exc = f.exception()
            if exc is not None:
                self.error = self.error or str(exc)
                return
            result = f.result()
            if not result.up:
                self.error = self.error or f"{result.target} at {result.ts}: {result.error}"
                return
            with self._lock:
                self.samples += result.samples
                self.scrapes += 1
            if on_done is not None:
                on_done(result.samples)

        future.add_done_callback(done)
        return True


@dataclass(frozen=True)
class Feed:
    """What the history loader and the live feeder share: the running service and its own
    address, the state they record progress in, the simulation they send from, and the event
    that stops them."""

    service: Service
    url: str  # where this service listens (not whatever else answers on the port)
    state: DemoState
    source: SegmentSource
    targets: dict[str, ScrapeTarget]
    t0: float  # where this run's live traffic starts (Unix seconds, a scrape time)
    live_first: Segment  # the first live hour's segment; the newest history may end inside it
    stop: threading.Event

    def span_sender(self, *, workers: int, max_pending: int) -> SpanSender:
        return SpanSender(
            self.url + "/v1/traces", self.stop, workers=workers, max_pending=max_pending
        )

    def metric_replayer(self, *, workers: int) -> MetricReplayer:
        return MetricReplayer(self.service.scraper, self.stop, workers=workers)
