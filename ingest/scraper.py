"""Scrapes Prometheus-text endpoints (vLLM, dcgm-exporter, anything in that format) into DuckDB.

One scrape = one HTTP GET (the target's timeout, a size cap, gzip accepted), one parse
(ingest/prom_text.py) and ONE write op through the storage gateway: the samples and a row in
``scrapes``, committed together. A failed scrape (refused, timed out, non-200, too big, not
valid text) writes only its ``scrapes`` row with ``up = false`` and the error; nothing partial.
Samples the parser drops one by one (a timestamp out of bounds, a NaN or negative counter) are
counted in ``inferledger_scrape_samples_dropped_total``; the rest of the scrape is kept.

Replays: ``ingest_text`` stores one page as if scraped at a given time (the same parse and
write); ``ingest_pages`` / ``store_scrapes`` store many at once in one write, reading each page
through its target's ``PageTemplate`` (rows identical to the parser's) — what a history load
uses (inferledger demo), never the live path.

The target's timeout is a deadline for the whole exchange (connect, headers, body), not for
each socket read: requests' own timeout restarts at every read, so a server that sends one byte
every 2 s would hold a scrape with ``timeout_s: 3`` forever (issue #17). ``_Deadline`` shuts
the connection's socket down when the deadline passes, which ends a blocked read at once.

Scheduling: one APScheduler job per target (id ``scrape:<name>``), run on a thread pool of its
own with one worker per target. A target runs at most one scrape at a time (max_instances=1),
so with a worker per target a slow or dead target holds only its own worker and never delays
the others. The jobs live in a memory job store of their own: they are rebuilt from settings
at every start, and a bound method cannot be serialized into a persistent store anyway.
"""

from __future__ import annotations

import contextlib
import logging
import math
import re
import socket
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import requests
import requests.adapters
import urllib3.connection
import urllib3.connectionpool
from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.job import Job
from apscheduler.jobstores.memory import MemoryJobStore
from apscheduler.schedulers.base import BaseScheduler
from urllib3.exceptions import ReadTimeoutError

from inferledger.core.errors import InferLedgerError
from inferledger.core.service_metrics import ServiceMetrics
from inferledger.core.settings import ScrapeTarget
from inferledger.core.storage import Storage, Transaction
from ingest.prom_text import (
    SAMPLE_SCHEMA,
    DropReason,
    Exposition,
    ExpositionError,
    PageReader,
    read_exposition,
)

log = logging.getLogger(__name__)

# Prometheus's own Accept header, plus `escaping=allow-utf-8` (what Prometheus 3 sends): without
# it prometheus_client (0.26, what vLLM serves /metrics with) answers OpenMetrics whose sample
# names have ':' turned into '_' while its TYPE lines keep ':' (vllm_prompt_tokens_total under
# "# TYPE vllm:prompt_tokens counter"), so every vLLM sample would parse as an untyped stray.
ACCEPT_HEADER = (
    "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.5,"
    "text/plain;version=0.0.4;q=0.4,*/*;q=0.1"
)
SCRAPE_EXECUTOR = "scrape"
SCRAPE_JOBSTORE = "scrape"
_CHUNK_BYTES = 64 * 1024
_BATCH = "scrape_batch"
_INSERT_SAMPLES = (
    "INSERT INTO metric_samples (ts, target, metric, family, type, labels, series_key, le, value) "
    f"SELECT ts, ?, metric, family, type, labels, series_key, le, value FROM {_BATCH}"
)
_INSERT_SCRAPE = (
    "INSERT INTO scrapes (ts, target, kind, deployment, url, up, duration_s, samples, "
    "http_status, error) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_ERRNO = re.compile(r"\[Errno -?\d+\][^'\")]*")
_CLOSED = "scraper closed"


@dataclass(frozen=True)
class ScrapeResult:
    """What one scrape did; the same facts as its row in ``scrapes``."""

    target: str
    ts: datetime
    up: bool
    samples: int
    duration_s: float
    http_status: int | None
    error: str | None
    # Samples the parser dropped one by one (ingest/prom_text.py); not in the row, but in
    # inferledger_scrape_samples_dropped_total.
    dropped: int = 0


class _ScrapeFailure(Exception):
    def __init__(self, message: str, http_status: int | None = None) -> None:
        super().__init__(message)
        self.http_status = http_status


class _Deadline:
    """The end of one scrape's HTTP exchange, enforced on its sockets.

    While a scrape runs, the socket of every connection its thread uses is registered here
    (``watch``, from the connection classes below); when the deadline passes, or the scraper
    closes, ``expire`` shuts them down, which wakes a read blocked in any phase (headers, body)
    with end-of-file. The sockets, not the connections, are kept: http.client drops a
    connection's socket as soon as a response that ends at end-of-file begins, while that
    response goes on reading from it. Connections find the deadline of the scrape their thread
    is running through a thread-local: requests and urllib3 offer no way to hand it down.
    """

    _current = threading.local()

    def __init__(self, seconds: float) -> None:
        self.expired = False
        self.closed = False  # expired because the scraper closed, not because time ran out
        self._socks: list[socket.socket] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self.expire)
        self._timer.daemon = True

    def __enter__(self) -> _Deadline:
        _Deadline._current.deadline = self
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()
        _Deadline._current.deadline = None

    @classmethod
    def watch_current(cls, conn: urllib3.connection.HTTPConnection) -> None:
        deadline: _Deadline | None = getattr(cls._current, "deadline", None)
        if deadline is not None and conn.sock is not None:
            deadline.watch(conn.sock)

    def watch(self, sock: socket.socket) -> None:
        with self._lock:
            if sock not in self._socks:
                self._socks.append(sock)
            expired = self.expired
        if expired:  # the deadline passed while this socket was connecting
            _shut(sock)

    def expire(self, closed: bool = False) -> None:
        with self._lock:
            self.closed = self.closed or closed
            self.expired = True
            socks = list(self._socks)
        for sock in socks:
            _shut(sock)


def _shut(sock: socket.socket) -> None:
    # shutdown, not close: close() does not wake a read blocked in another thread, and the
    # socket's owner still closes it as usual.
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


class _Watched:
    """Mixed into urllib3's connection classes: hands each socket to the current scrape's
    deadline. connect(): a new socket (the deadline may have passed while it was being
    opened); request(): a kept-alive socket, connected during an earlier scrape."""

    def connect(self) -> None:
        super().connect()  # type: ignore[misc]
        _Deadline.watch_current(self)

    def request(self, *args: Any, **kwargs: Any) -> None:
        _Deadline.watch_current(self)
        super().request(*args, **kwargs)  # type: ignore[misc]


class _WatchedHTTPConnection(_Watched, urllib3.connection.HTTPConnection):
    pass


class _WatchedHTTPSConnection(_Watched, urllib3.connection.HTTPSConnection):
    pass


class _WatchedHTTPConnectionPool(urllib3.connectionpool.HTTPConnectionPool):
    ConnectionCls = _WatchedHTTPConnection


class _WatchedHTTPSConnectionPool(urllib3.connectionpool.HTTPSConnectionPool):
    ConnectionCls = _WatchedHTTPSConnection


class _ScrapeAdapter(requests.adapters.HTTPAdapter):
    """requests' adapter with connections a ``_Deadline`` can shut down."""

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = {
            "http": _WatchedHTTPConnectionPool,
            "https": _WatchedHTTPSConnectionPool,
        }


def scrape_job_id(target: ScrapeTarget) -> str:
    return f"scrape:{target.name}"


def scrape_executors(targets: Sequence[ScrapeTarget]) -> dict[str, ThreadPoolExecutor]:
    """Executor config for ``BackgroundScheduler(executors=...)``: a pool with one worker per
    target, so that no scrape ever waits for a thread (see the module docstring)."""
    return {SCRAPE_EXECUTOR: ThreadPoolExecutor(max_workers=max(1, len(targets)))}


class Scraper:
    """Scrapes targets and stores each scrape in one write through the storage gateway."""

    def __init__(
        self,
        storage: Storage,
        metrics: ServiceMetrics | None = None,
        max_bytes: int = 16 * 1024 * 1024,
    ) -> None:
        self.storage = storage
        self.metrics = metrics
        self.max_bytes = max_bytes
        self._sessions: dict[str, requests.Session] = {}
        self._last_up: dict[str, bool] = {}
        self._last_dropped: dict[str, frozenset[DropReason]] = {}
        self._deadlines: set[_Deadline] = set()  # of the scrapes in flight
        # ingest_pages: each target's page shape, learned from its first page
        self._reader = PageReader()
        self._read_lock = threading.Lock()
        self._closed = False
        self._lock = threading.Lock()

    # ---------------------------------------------------------------- scheduling
    def schedule(self, scheduler: BaseScheduler, targets: Sequence[ScrapeTarget]) -> list[Job]:
        """Add (or replace) one interval job per target; remove jobs of targets no longer listed.

        The first call adds the ``scrape`` executor and job store unless the scheduler was built
        with them (``scrape_executors``); size the executor for the largest target list.
        """
        # ValueError: the alias exists (an earlier call, or built with scrape_executors()).
        with contextlib.suppress(ValueError):
            scheduler.add_jobstore(MemoryJobStore(), alias=SCRAPE_JOBSTORE)
        with contextlib.suppress(ValueError):
            scheduler.add_executor(scrape_executors(targets)[SCRAPE_EXECUTOR], SCRAPE_EXECUTOR)
        wanted = {scrape_job_id(t) for t in targets}
        for job in scheduler.get_jobs(jobstore=SCRAPE_JOBSTORE):
            if job.id not in wanted:
                job.remove()
        start = datetime.now(UTC)
        return [
            scheduler.add_job(
                self.scrape_once,
                "interval",
                seconds=target.interval_s,
                args=[target],
                id=scrape_job_id(target),
                name=f"scrape {target.name} ({target.url})",
                jobstore=SCRAPE_JOBSTORE,
                executor=SCRAPE_EXECUTOR,
                replace_existing=True,
                max_instances=1,
                coalesce=True,
                # A run late by up to one interval still runs; older backlogs coalesce into it.
                misfire_grace_time=max(1, math.ceil(target.interval_s)),
                next_run_time=start,
            )
            for target in targets
        ]

    def close(self) -> None:
        """End the scrapes in flight at once and close the HTTP sessions; a scrape cut short
        by close, or started after it, is not stored. Call it before waiting for the
        scheduler's jobs to stop, so that shutdown never waits for a slow target."""
        with self._lock:
            self._closed = True
            sessions, self._sessions = list(self._sessions.values()), {}
            deadlines = list(self._deadlines)
        for deadline in deadlines:
            deadline.expire(closed=True)
        for session in sessions:
            session.close()

    # ---------------------------------------------------------------- scraping
    def scrape_once(self, target: ScrapeTarget, now: datetime | None = None) -> ScrapeResult:
        """Scrape ``target`` once and store the result; never raises for a failed scrape.

        ``now`` (timezone-aware) is the scrape's timestamp; default: the current time.
        """
        if now is not None and now.utcoffset() is None:
            raise ValueError("now must be timezone-aware")
        ts = now or datetime.now(UTC)
        clock = time.perf_counter()
        http_status: int | None = None
        parsed: Exposition | None = None
        error: str | None = None
        try:
            http_status, content_type, body = self._fetch(target)
            parsed = read_exposition(_decode(body, content_type), content_type, ts)
        except _ScrapeFailure as exc:
            error, http_status = str(exc), exc.http_status
        except ExpositionError as exc:
            error = str(exc)
        duration_s = time.perf_counter() - clock
        if error == _CLOSED:
            # Cut short by our own shutdown: it says nothing about the target, so no row.
            return ScrapeResult(target.name, ts, False, 0, duration_s, http_status, error)
        return self._record(target, ts, parsed, duration_s, http_status, error)

    def ingest_text(
        self,
        target: ScrapeTarget,
        text: str,
        content_type: str,
        scrape_ts: datetime,
        duration_s: float = 0.0,
    ) -> ScrapeResult:
        """Store exposition text as if ``target`` had been scraped at ``scrape_ts`` (replaying
        recorded or simulated scrapes); bad text is recorded as a failed scrape."""
        parsed: Exposition | None = None
        error: str | None = None
        try:
            parsed = read_exposition(text, content_type, scrape_ts)
        except ExpositionError as exc:
            error = str(exc)
        return self._record(target, scrape_ts, parsed, duration_s, None, error)

    def ingest_pages(
        self, pages: Sequence[tuple[ScrapeTarget, datetime, str]], content_type: str
    ) -> list[ScrapeResult]:
        """Store many pages as if each target had been scraped at its time, in ONE write: the
        bulk form of :meth:`ingest_text` for replaying history (inferledger demo).

        Each page is read through its target's :class:`PageTemplate` (learned from the
        target's first page by the parser itself, so the rows are the parser's) and parsed the
        ordinary way when the template cannot vouch for it. Bad text raises
        :class:`ExpositionError` and nothing of the batch is stored."""
        read = [(t, ts, self.read_page(t.name, text, content_type, ts)) for t, ts, text in pages]
        return self.store_scrapes(
            [(t, ts, e.samples.num_rows) for t, ts, e in read],
            sample_rows([(t.name, e) for t, _, e in read]),
            dropped=[e for _, _, e in read],
        )

    def read_page(self, name: str, text: str, content_type: str, ts: datetime) -> Exposition:
        """One page's rows: through the template learned for target `name`, else the parser."""
        with self._read_lock:
            return self._reader.read(name, text, content_type, ts)

    def store_scrapes(
        self,
        scrapes: Sequence[tuple[ScrapeTarget, datetime, int]],
        samples: pa.Table,
        *,
        dropped: Sequence[Exposition] = (),
    ) -> list[ScrapeResult]:
        """Store successful scrapes in one write: their ``scrapes`` rows (target, time, sample
        count; duration 0 as :meth:`ingest_text`) and `samples`, rows of ``metric_samples``
        with their target (:func:`sample_rows`). `dropped`: the scrapes' Expositions, only to
        count what the parser dropped. Raises what storage raises, and then stores nothing."""
        if not scrapes:
            return []
        if any(ts.utcoffset() is None for _, ts, _ in scrapes):
            raise ValueError("scrape timestamps must be timezone-aware")
        if sum(n for _, _, n in scrapes) != samples.num_rows:
            raise ValueError("the scrapes' sample counts do not add up to the samples given")
        rows = pa.table(
            {
                "ts": pa.array([ts for _, ts, _ in scrapes], pa.timestamp("us", tz="UTC")),
                "target": pa.array([t.name for t, _, _ in scrapes], pa.string()),
                "kind": pa.array([t.kind for t, _, _ in scrapes], pa.string()),
                "deployment": pa.array([t.deployment for t, _, _ in scrapes], pa.string()),
                "url": pa.array([t.url for t, _, _ in scrapes], pa.string()),
                "up": pa.array([True] * len(scrapes), pa.bool_()),
                "duration_s": pa.array([0.0] * len(scrapes), pa.float64()),
                "samples": pa.array([n for _, _, n in scrapes], pa.int32()),
                "http_status": pa.array([None] * len(scrapes), pa.int32()),
                "error": pa.array([None] * len(scrapes), pa.string()),
            }
        )

        def write(tx: Transaction) -> None:
            if samples.num_rows:
                tx.append_arrow("metric_samples", samples)
            tx.append_arrow("scrapes", rows)

        self.storage.write(write, units=len(scrapes))
        m = self.metrics
        if m is not None:
            for target, _, _ in scrapes:
                m.scrapes.labels(target=target.name, result="ok").inc()
            for (target, _, _), exposition in zip(scrapes, dropped, strict=False):
                for reason, n in exposition.dropped.items():
                    m.scrape_samples_dropped.labels(target=target.name, reason=reason).inc(n)
        return [ScrapeResult(t.name, ts, True, n, 0.0, None, None) for t, ts, n in scrapes]

    def _fetch(self, target: ScrapeTarget) -> tuple[int, str, bytes]:
        """GET the target within its timeout: (HTTP status, Content-Type, body) or a
        _ScrapeFailure."""
        with self._lock:
            if self._closed:
                raise _ScrapeFailure(_CLOSED)
            deadline = _Deadline(target.timeout_s)
            self._deadlines.add(deadline)
        status: int | None = None

        def timed_out() -> _ScrapeFailure:
            if deadline.closed:
                return _ScrapeFailure(_CLOSED, status)
            return _ScrapeFailure(f"timed out after {target.timeout_s:g} s", status)

        try:
            with (
                deadline,
                self._session(target.name).get(
                    target.url,
                    headers={"Accept": ACCEPT_HEADER},
                    # bounds the connect and each read; the deadline bounds the whole exchange
                    timeout=target.timeout_s,
                    stream=True,
                ) as resp,
            ):
                status = resp.status_code
                if status != 200:
                    raise _ScrapeFailure(f"HTTP {status} {resp.reason or ''}".strip(), status)
                declared = resp.headers.get("Content-Length", "")
                if declared.isdigit() and "Content-Encoding" not in resp.headers:
                    self._check_size(int(declared), status)
                body = bytearray()
                # iter_content inflates gzip chunk by chunk, so the cap bounds memory too.
                for chunk in resp.iter_content(chunk_size=_CHUNK_BYTES):
                    body += chunk
                    self._check_size(len(body), status)
                    if deadline.expired:
                        break
                # A body without Content-Length ends at end-of-file, so one cut off by the
                # deadline looks complete: check the deadline, not just the read.
                if deadline.expired:
                    raise timed_out()
                return status, resp.headers.get("Content-Type", ""), bytes(body)
        except requests.Timeout:
            raise timed_out() from None
        except requests.ConnectionError as exc:
            # A read timeout while streaming the body surfaces as a ConnectionError, and a
            # socket shut down by the deadline as a dropped connection.
            if deadline.expired or any(isinstance(arg, ReadTimeoutError) for arg in exc.args):
                raise timed_out() from None
            raise _ScrapeFailure(f"connection failed: {_reason(exc)}", status) from None
        except requests.RequestException as exc:
            if deadline.expired:  # e.g. a body cut short of its Content-Length
                raise timed_out() from None
            raise _ScrapeFailure(f"request failed: {_reason(exc)}", status) from None
        finally:
            with self._lock:
                self._deadlines.discard(deadline)

    def _check_size(self, size: int, status: int) -> None:
        if size > self.max_bytes:
            raise _ScrapeFailure(
                f"response larger than scrape.max_bytes ({self.max_bytes} bytes)", status
            )

    def _session(self, name: str) -> requests.Session:
        # One session per target: keep-alive to each target, and no session shared by the
        # threads of different targets (requests does not promise Session is thread-safe).
        with self._lock:
            session = self._sessions.get(name)
            if session is None:
                session = self._sessions[name] = requests.Session()
                # Scrape exactly the configured URL: no proxy or .netrc from the environment.
                session.trust_env = False
                adapter = _ScrapeAdapter()  # max_retries=0, as requests' default adapter
                session.mount("http://", adapter)
                session.mount("https://", adapter)
            return session

    # ---------------------------------------------------------------- storing
    def _record(
        self,
        target: ScrapeTarget,
        ts: datetime,
        parsed: Exposition | None,
        duration_s: float,
        http_status: int | None,
        error: str | None,
    ) -> ScrapeResult:
        clock = time.perf_counter()
        samples: pa.Table | None = None if parsed is None else parsed.samples
        count = 0 if samples is None else samples.num_rows  # None: the scrape failed
        row = [
            ts,
            target.name,
            target.kind,
            target.deployment,
            target.url,
            error is None,
            duration_s,
            count,
            http_status,
            error,
        ]

        def write(tx: Transaction) -> None:
            if count:
                tx.insert_arrow(_INSERT_SAMPLES, {_BATCH: samples}, [target.name])
            tx.execute(_INSERT_SCRAPE, row)

        try:
            self.storage.write(write, units=count + 1)
        except InferLedgerError as exc:
            # Storage refused (queue full, closed, a replayed scrape): the scrape is lost, and
            # there is nowhere to record it but the log and the service metrics.
            log.warning("scrape of %s at %s not stored: %s", target.name, ts.isoformat(), exc)
            error, count = f"not stored: {exc}", 0
        dropped = 0 if parsed is None else parsed.dropped_total
        result = ScrapeResult(
            target.name, ts, error is None, count, duration_s, http_status, error, dropped
        )
        self._observe(result, duration_s + time.perf_counter() - clock, parsed)
        return result

    def _observe(self, result: ScrapeResult, elapsed_s: float, parsed: Exposition | None) -> None:
        reasons = frozenset() if parsed is None else frozenset(parsed.dropped)
        with self._lock:
            was_up = self._last_up.get(result.target)
            self._last_up[result.target] = result.up
            new_reasons = reasons - self._last_dropped.get(result.target, frozenset())
            if parsed is not None:  # a failed fetch says nothing about the samples
                self._last_dropped[result.target] = reasons
        if result.up and was_up is False:
            log.info("scrape target %s is up again", result.target)
        elif not result.up and was_up is not False:
            log.warning("scrape of %s failed: %s", result.target, result.error)
        if new_reasons and parsed is not None:
            # Once when a target starts sending a kind of bad sample, not at every scrape.
            log.warning(
                "scrape of %s dropped %d samples: %s",
                result.target,
                parsed.dropped_total,
                "; ".join(
                    f"{parsed.dropped[r]} {r} (e.g. {parsed.examples[r]})" for r in sorted(reasons)
                ),
            )
        m = self.metrics
        if m is None:
            return
        m.scrapes.labels(target=result.target, result="ok" if result.up else "error").inc()
        m.scrape_duration.labels(target=result.target).observe(elapsed_s)
        m.target_up.labels(target=result.target).set(1 if result.up else 0)
        if result.up:
            m.scrape_samples.labels(target=result.target).set(result.samples)
        if parsed is not None:
            for reason, n in parsed.dropped.items():
                m.scrape_samples_dropped.labels(target=result.target, reason=reason).inc(n)


def sample_rows(scrapes: Sequence[tuple[str, Exposition]]) -> pa.Table:
    """The ``metric_samples`` rows of parsed scrapes, each with its target's name: one
    contiguous table (cheap to hand between processes, appended in one statement)."""
    if not scrapes:
        return SAMPLE_SCHEMA.insert(1, pa.field("target", pa.string())).empty_table()
    tables = [
        e.samples.add_column(1, "target", pa.repeat(pa.scalar(name), e.samples.num_rows))
        for name, e in scrapes
    ]
    return pa.concat_tables(tables).combine_chunks()


def _decode(body: bytes, content_type: str) -> str:
    charset = "utf-8"
    for param in content_type.split(";")[1:]:
        key, _, value = param.partition("=")
        if key.strip().lower() == "charset" and value.strip():
            charset = value.strip().strip('"')
    try:
        return body.decode(charset)
    except (LookupError, UnicodeDecodeError):
        raise _ScrapeFailure(f"response is not valid {charset} text", 200) from None


def _reason(exc: requests.RequestException) -> str:
    """The useful end of requests' nested message: "[Errno 111] Connection refused"."""
    text = str(exc)
    found = _ERRNO.search(text)
    return found.group(0).strip() if found else text[:300]
