"""Scrapes Prometheus-text endpoints (vLLM, dcgm-exporter, anything in that format) into DuckDB.

One scrape = one HTTP GET (the target's timeout, a size cap, gzip accepted), one parse
(ingest/prom_text.py) and ONE write op through the storage gateway: the samples and a row in
``scrapes``, committed together. A failed scrape (refused, timed out, non-200, too big, not
valid text) writes only its ``scrapes`` row with ``up = false`` and the error; nothing partial.

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
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import duckdb
import pyarrow as pa
import requests
from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.job import Job
from apscheduler.jobstores.memory import MemoryJobStore
from apscheduler.schedulers.base import BaseScheduler
from urllib3.exceptions import ReadTimeoutError

from inferledger.errors import InferLedgerError
from inferledger.service_metrics import ServiceMetrics
from inferledger.settings import ScrapeTarget
from inferledger.storage import Storage
from ingest.prom_text import ExpositionError, parse_exposition

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


class _ScrapeFailure(Exception):
    def __init__(self, message: str, http_status: int | None = None) -> None:
        super().__init__(message)
        self.http_status = http_status


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
        """Close the HTTP sessions (the scheduler's jobs are the caller's to stop first)."""
        with self._lock:
            sessions, self._sessions = list(self._sessions.values()), {}
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
        samples: pa.Table | None = None
        error: str | None = None
        try:
            http_status, content_type, body = self._fetch(target)
            samples = parse_exposition(_decode(body, content_type), content_type, ts)
        except _ScrapeFailure as exc:
            error, http_status = str(exc), exc.http_status
        except ExpositionError as exc:
            error = str(exc)
        return self._record(target, ts, samples, time.perf_counter() - clock, http_status, error)

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
        samples: pa.Table | None = None
        error: str | None = None
        try:
            samples = parse_exposition(text, content_type, scrape_ts)
        except ExpositionError as exc:
            error = str(exc)
        return self._record(target, scrape_ts, samples, duration_s, None, error)

    def _fetch(self, target: ScrapeTarget) -> tuple[int, str, bytes]:
        """GET the target: (HTTP status, Content-Type, body) or a _ScrapeFailure."""
        timed_out = f"timed out after {target.timeout_s:g} s"
        deadline = time.monotonic() + target.timeout_s
        status: int | None = None
        try:
            with self._session(target.name).get(
                target.url,
                headers={"Accept": ACCEPT_HEADER},
                timeout=target.timeout_s,
                stream=True,
            ) as resp:
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
                    # requests' timeout bounds each socket wait, not the whole download.
                    if time.monotonic() > deadline:
                        raise _ScrapeFailure(timed_out, status)
                return status, resp.headers.get("Content-Type", ""), bytes(body)
        except requests.Timeout:
            raise _ScrapeFailure(timed_out, status) from None
        except requests.ConnectionError as exc:
            # A read timeout while streaming the body surfaces as a ConnectionError.
            if any(isinstance(arg, ReadTimeoutError) for arg in exc.args):
                raise _ScrapeFailure(timed_out, status) from None
            raise _ScrapeFailure(f"connection failed: {_reason(exc)}", status) from None
        except requests.RequestException as exc:
            raise _ScrapeFailure(f"request failed: {_reason(exc)}", status) from None

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
            return session

    # ---------------------------------------------------------------- storing
    def _record(
        self,
        target: ScrapeTarget,
        ts: datetime,
        samples: pa.Table | None,
        duration_s: float,
        http_status: int | None,
        error: str | None,
    ) -> ScrapeResult:
        clock = time.perf_counter()
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

        def write(cur: duckdb.DuckDBPyConnection) -> None:
            if count:
                cur.register(_BATCH, samples)
                try:
                    cur.execute(_INSERT_SAMPLES, [target.name])
                finally:
                    cur.unregister(_BATCH)
            cur.execute(_INSERT_SCRAPE, row)

        try:
            self.storage.write(write, units=count + 1)
        except (InferLedgerError, duckdb.Error) as exc:
            # Storage refused (queue full, closed, a replayed scrape): the scrape is lost, and
            # there is nowhere to record it but the log and the service metrics.
            log.warning("scrape of %s at %s not stored: %s", target.name, ts.isoformat(), exc)
            error, count = f"not stored: {exc}", 0
        result = ScrapeResult(target.name, ts, error is None, count, duration_s, http_status, error)
        self._observe(result, duration_s + time.perf_counter() - clock)
        return result

    def _observe(self, result: ScrapeResult, elapsed_s: float) -> None:
        with self._lock:
            was_up = self._last_up.get(result.target)
            self._last_up[result.target] = result.up
        if result.up and was_up is False:
            log.info("scrape target %s is up again", result.target)
        elif not result.up and was_up is not False:
            log.warning("scrape of %s failed: %s", result.target, result.error)
        m = self.metrics
        if m is None:
            return
        m.scrapes.labels(target=result.target, result="ok" if result.up else "error").inc()
        m.scrape_duration.labels(target=result.target).observe(elapsed_s)
        m.target_up.labels(target=result.target).set(1 if result.up else 0)
        if result.up:
            m.scrape_samples.labels(target=result.target).set(result.samples)


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
