"""The threads behind the simulated vLLM server: the simulation thread, which owns the
LiveCluster and runs it on a virtual clock (virtual = speed x (wall - start)), and the span
exporter, which posts finished requests' `llm_request` spans over OTLP/HTTP.

HTTP worker threads never touch the LiveCluster: they hand a PendingRequest to
SimEngine.submit() (which stamps its arrival on the virtual clock) and wait on its event. The
simulation thread submits arrivals in stamp order, advances the cluster to each instant that
matters (the next step end while tokens are being streamed, else the next event) and publishes
token counts and finished records to the waiting requests.

A client that goes away (a stream's body closed before its end, or a non-streamed request's
connection gone while it waits) is handed back through abandon(): the simulation thread aborts
that one request in the LiveCluster, as vLLM aborts a request whose client disconnected.
"""

from __future__ import annotations

import logging
import math
import queue
import threading
import time
from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit

import requests

from inferledger.core.errors import SettingsError
from inferledger.sim_errors import ApiError
from models.serving.live import LiveCluster, RequestHandle
from models.serving.records import ReplicaRecord, RequestRecord
from models.serving.request import RequestSpec, Segment
from models.serving.telemetry import engine_spans

log = logging.getLogger(__name__)

# Buckets of the publication-lag histogram (wall seconds).
LAG_BUCKETS_S = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0)


# --- the simulation thread --------------------------------------------------------------------


class VirtualClock:
    """virtual seconds = speed x (wall seconds since start)."""

    def __init__(self, speed: float, wall: Callable[[], float] = time.monotonic) -> None:
        if not (speed > 0 and math.isfinite(speed)):
            raise SettingsError(f"--speed must be a finite number > 0, got {speed}")
        self.speed = speed
        self._wall = wall
        self._start = wall()

    def now(self) -> float:
        return (self._wall() - self._start) * self.speed

    def wall_delay(self, virtual_s: float) -> float:
        """Wall seconds from now until virtual time `virtual_s` (negative when past)."""
        return self._start + virtual_s / self.speed - self._wall()


class PendingRequest:
    """One request between an HTTP thread and the simulation thread: what to submit (a
    RequestSpec but for the arrival, which submit() stamps), and what the simulation thread
    publishes (tokens produced so far, then the record), signalled through `event`."""

    __slots__ = (
        "abandoned",
        "arrival_s",
        "context",
        "event",
        "handle",
        "max_tokens",
        "output_tokens",
        "prompt",
        "record",
        "replica",
        "request_id",
        "stream",
        "tokens",
    )

    def __init__(
        self,
        request_id: str,
        prompt: tuple[Segment, ...],
        output_tokens: int,
        *,
        max_tokens: int | None,
        context: Any,
        replica: int | None,
        stream: bool,
    ) -> None:
        self.request_id = request_id
        self.prompt = prompt
        self.output_tokens = output_tokens
        self.max_tokens = max_tokens
        self.context = context
        self.replica = replica  # None: the router places it
        self.stream = stream
        self.event = threading.Event()
        self.arrival_s = 0.0
        self.handle: RequestHandle | None = None
        self.tokens = 0  # produced so far, as last published by the simulation thread
        self.record: RequestRecord | None = None
        self.abandoned = False


class ServiceStopping(ApiError):
    def __init__(self) -> None:
        super().__init__("the server is shutting down", status=503)


class SimEngine:
    """The simulation thread and the LiveCluster it owns."""

    MIN_TICK_S = 0.001  # wall seconds; at speed 1 every engine step is longer than this
    MAX_WAIT_S = 0.5

    def __init__(
        self,
        live: LiveCluster,
        clock: VirtualClock,
        on_finished: Callable[[list[RequestRecord]], None] | None = None,
    ) -> None:
        self.live = live
        self.clock = clock
        self._on_finished = on_finished
        self._lock = threading.Lock()  # the inbox, and arrival stamps in clock order
        self._wake = threading.Condition(self._lock)
        self._inbox: list[PendingRequest] = []
        self._aborts: list[PendingRequest] = []  # abandoned by their clients
        self._stopping = False
        self._abort = False
        self._exit = False
        self.sim_lock = threading.Lock()  # held while the LiveCluster changes
        self._pending: dict[str, PendingRequest] = {}
        self._streams: dict[str, PendingRequest] = {}
        self.records: list[RequestRecord] = []  # every finished request, for /metrics
        self.failure: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="simulation", daemon=True)
        # load statistics: ticks, wall time spent simulating, and how late each due instant
        # (a step end or a finish the thread woke for) was published
        self.ticks = 0
        self.busy_s = 0.0
        self.lag_sum_s = 0.0
        self.lag_count = 0
        self.max_lag_s = 0.0
        self.lag_buckets = [0] * (len(LAG_BUCKETS_S) + 1)  # per bucket, not cumulative
        self.client_aborts = 0  # requests aborted because their client went away

    def start(self) -> SimEngine:
        self._thread.start()
        return self

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def submit(self, pending: PendingRequest) -> None:
        """Stamp the arrival on the virtual clock and queue it for the simulation thread."""
        with self._lock:
            if self._stopping:
                raise ServiceStopping()
            pending.arrival_s = self.clock.now()
            self._inbox.append(pending)
            self._wake.notify()

    def abandon(self, pending: PendingRequest) -> None:
        """The client went away (or its stream's body was closed, as it is at every stream's
        end): abort the request in the simulation unless it has finished. Safe to call more
        than once and from any thread."""
        with self._lock:
            if pending.abandoned or pending.record is not None:
                return
            pending.abandoned = True
            self._aborts.append(pending)
            self._wake.notify()

    def stop_accepting(self) -> None:
        with self._lock:
            self._stopping = True

    def abort_all(self) -> None:
        """Finish every request in flight with finish_reason "abort" (shutdown)."""
        with self._lock:
            self._stopping = True
            self._abort = True
            self._wake.notify()

    def stop(self, timeout_s: float = 5.0) -> None:
        with self._lock:
            self._stopping = True
            self._exit = True
            self._wake.notify()
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    @property
    def in_flight(self) -> int:
        return len(self._pending) + len(self._inbox)

    def snapshot(self) -> tuple[float, tuple[ReplicaRecord, ...], list[RequestRecord]]:
        """(now, replica records, finished requests): a consistent view for /metrics."""
        with self.sim_lock:
            self.live.sample_now()
            return self.live.now, self.live.replica_records(), list(self.records)

    def _run(self) -> None:
        try:
            self._loop()
        except BaseException as exc:  # a bug: fail every waiting request rather than hang
            self.failure = exc
            log.exception("simulation thread failed")
            for p in list(self._pending.values()) + self._inbox:
                p.event.set()

    def _loop(self) -> None:
        live = self.live
        clock = self.clock
        pending = self._pending
        streams = self._streams
        due = math.inf  # the virtual instant the last wait was for
        while True:
            with self._lock:
                target = clock.now()
                inbox, self._inbox = self._inbox, []
                aborts, self._aborts = self._aborts, []
                abort, exit_now = self._abort, self._exit
                self._abort = False
            started = time.perf_counter()
            with self.sim_lock:
                for p in inbox:
                    spec = RequestSpec(
                        p.request_id,
                        p.arrival_s,
                        p.prompt,
                        p.output_tokens,
                        p.max_tokens,
                        p.context,
                    )
                    p.handle = live.submit(spec, replica=p.replica)
                    pending[p.request_id] = p
                    if p.stream:
                        streams[p.request_id] = p
                finished = live.advance_to(max(target, live.now))
                for p in aborts:
                    streams.pop(p.request_id, None)
                    handle = p.handle
                    if handle is not None and handle.record is None:
                        self.client_aborts += 1
                        finished += live.abort(handle)
                if abort:
                    finished += live.abort_all()
                self.records.extend(finished)
                for record in finished:
                    p = pending.pop(record.request_id, None)
                    if p is not None:
                        streams.pop(record.request_id, None)
                        p.tokens = record.output_tokens
                        p.record = record
                        p.event.set()
                for rid, p in list(streams.items()):
                    if p.abandoned:
                        del streams[rid]
                        continue
                    n = live.tokens_produced(p.handle)  # type: ignore[arg-type]
                    if n != p.tokens:
                        p.tokens = n
                        p.event.set()
                nxt = live.next_event_s()
                if streams:
                    nxt = min(nxt, live.next_step_end_s())
            if finished and self._on_finished is not None:
                self._on_finished(finished)
            self.ticks += 1
            self.busy_s += time.perf_counter() - started
            if exit_now:
                return
            if due <= target:
                lag = -clock.wall_delay(due)
                self.lag_sum_s += lag
                self.lag_count += 1
                self.lag_buckets[bisect_left(LAG_BUCKETS_S, lag)] += 1
                if lag > self.max_lag_s:
                    self.max_lag_s = lag
            due = nxt
            delay = clock.wall_delay(nxt) if nxt < math.inf else self.MAX_WAIT_S
            delay = min(max(delay, self.MIN_TICK_S), self.MAX_WAIT_S)
            with self._lock:
                if not self._inbox and not self._aborts and not self._exit and not self._abort:
                    self._wake.wait(delay)


# --- span export ------------------------------------------------------------------------------


class SpanExporter:
    """Posts finished requests' `llm_request` spans as OTLP/HTTP protobuf, in batches, from a
    bounded queue on its own thread (like OpenTelemetry's BatchSpanProcessor): offer() never
    blocks; when the queue is full, or the endpoint refuses or cannot be reached, spans are
    dropped and counted."""

    def __init__(
        self,
        endpoint: str,
        *,
        epoch_ns: int,
        resource: Mapping[str, str],
        max_queue: int = 8192,
        batch_size: int = 512,
        delay_s: float = 1.0,
        timeout_s: float = 10.0,
    ) -> None:
        self.endpoint = endpoint
        self.epoch_ns = epoch_ns
        self.resource = dict(resource)
        self.batch_size = batch_size
        self.delay_s = delay_s
        self.timeout_s = timeout_s
        self._queue: queue.Queue[RequestRecord] = queue.Queue(max_queue)
        self._stop = threading.Event()
        self._session = requests.Session()
        self._thread = threading.Thread(target=self._run, name="span-exporter", daemon=True)
        self.exported = 0
        self.dropped_queue_full = 0
        self.dropped_export_failed = 0
        self._failing = False

    def start(self) -> SpanExporter:
        self._thread.start()
        return self

    def offer(self, records: Iterable[RequestRecord]) -> None:
        for record in records:
            try:
                self._queue.put_nowait(record)
            except queue.Full:
                self.dropped_queue_full += 1

    @property
    def queued(self) -> int:
        return self._queue.qsize()

    def stop(self, timeout_s: float = 5.0) -> None:
        """Export what is queued (within timeout_s), then stop."""
        self._stop.set()
        self._thread.join(timeout_s)
        self._session.close()

    def _run(self) -> None:
        while True:
            batch = self._take()
            if batch:
                self._export(batch)
            elif self._stop.is_set():
                return

    def _take(self) -> list[RequestRecord]:
        batch: list[RequestRecord] = []
        deadline = time.monotonic() + self.delay_s
        while len(batch) < self.batch_size:
            timeout = 0.0 if self._stop.is_set() else deadline - time.monotonic()
            try:
                if timeout <= 0:
                    batch.append(self._queue.get_nowait())
                else:
                    batch.append(self._queue.get(timeout=timeout))
            except queue.Empty:
                break
        return batch

    def _export(self, batch: list[RequestRecord]) -> None:
        body = engine_spans(batch, epoch_ns=self.epoch_ns, resource=self.resource)
        n = sum(len(ss.spans) for rs in body.resource_spans for ss in rs.scope_spans)
        if not n:
            return
        try:
            resp = self._session.post(
                self.endpoint,
                data=body.SerializeToString(),
                headers={"Content-Type": "application/x-protobuf"},
                timeout=self.timeout_s,
            )
            ok = 200 <= resp.status_code < 300
            why = f"HTTP {resp.status_code}"
        except requests.RequestException as exc:
            ok, why = False, type(exc).__name__
        if ok:
            self.exported += n
            if self._failing:
                log.info("span export to %s works again", self.endpoint)
            self._failing = False
        else:
            self.dropped_export_failed += n
            if not self._failing:
                log.warning("span export to %s failed (%s); dropping spans", self.endpoint, why)
            self._failing = True


def traces_url(endpoint: str) -> str:
    """The OTLP/HTTP traces URL: as given, or with /v1/traces added when it has no path."""
    parts = urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise SettingsError(
            f"--otlp-traces-endpoint must be an http(s) URL (OTLP/HTTP protobuf), got {endpoint!r}"
        )
    if parts.path in ("", "/"):
        return endpoint.rstrip("/") + "/v1/traces"
    return endpoint
