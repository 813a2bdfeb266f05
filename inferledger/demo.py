"""`inferledger demo`: a week of a simulated company's LLM traffic, through the real ingest path.

It starts the real service (the one `inferledger serve` runs) on a real HTTP port, then feeds it
what a company with four internal apps, two vLLM deployments and a hosted fallback would send
(models/data/workload.yaml, docs/demo.md):

- traces: the apps' spans and vLLM's `llm_request` spans, POSTed as OTLP protobuf to /v1/traces
  by several concurrent senders, a few thousand spans per request;
- metrics: every engine's vLLM /metrics page and every GPU node's dcgm-exporter page, rendered
  every 15 s of simulated time and stored through Scraper.ingest_text with the scrape's own
  (historical) timestamp: the same parser and writes as a live scrape.

The dashboard is served at once. History loads in the background, newest first: first the
traces of every day (a few minutes for a week), then the metrics. The metrics dominate: storing
one vLLM page through the scrape path costs ~8 ms (prometheus_client's parser, then the write),
and a week holds ~40,000 scrapes per engine, far more than two minutes of work on a small
machine (docs/demo.md has the measured timings). Live traffic starts at the same time: the
simulation of the newest history day runs on into the first live hour, and from then on each
day is simulated ahead and released as the wall clock passes it.

Re-running reuses the database and backfills the time it was not running; --rebuild starts
over. `<db>.demo.json` beside the database records how it was generated and which history is
not loaded yet: a run stopped half-way leaves the database marked incomplete, and the next run
finishes the load (every segment regenerates identically from the seed; a span sent twice is
stored once, and a scrape already stored is skipped).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import logging
import math
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from inferledger.errors import InferLedgerError

if TYPE_CHECKING:  # heavy imports happen in run(), not when the CLI builds its parser
    from inferledger.server import Service
    from inferledger.settings import ScrapeTarget
    from models.workload.feed import ScrapePages, SimulatedSegment
    from models.workload.segments import Segment, SegmentSource

log = logging.getLogger(__name__)

DEFAULT_DB = "data/demo.duckdb"
DEFAULT_DAYS = 7.0
DEFAULT_SEED = 1
MAX_DAYS = 90.0
STATE_FORMAT = 1
SCRAPE_INTERVAL_S = 15.0
DAY_S = 86_400.0
LIVE_SEGMENT_S = DAY_S  # later live traffic is simulated a day at a time...
LIVE_LEAD_S = 1_800.0  # ...starting this long before it is needed
LIVE_TICK_S = 5.0  # how often live spans are sent
HISTORY_WINDOW_S = 3_600.0  # history is sent an hour at a time, newest hour first
HISTORY_SENDERS = 4
METRIC_COST = 18.0  # a day of scrapes takes about this many times as long as a day of traces
HISTORY_METRIC_WORKERS = 8
EXPOSITION = "text/plain; version=0.0.4; charset=utf-8"


class DemoError(InferLedgerError):
    """The demo cannot run as asked; ``str(exc)`` says what to do."""

    http_status = 400


# --- command line -------------------------------------------------------------------------


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add `demo` to the CLI's subparsers."""
    p = subparsers.add_parser(
        "demo",
        help="serve the dashboard over a simulated week of LLM traffic",
        description=(
            "Generate N days of traces and engine/GPU metrics from the serving simulator, load "
            "them through the real ingest path, and keep serving the dashboard with live "
            "traffic. Reuses an existing demo database unless --rebuild."
        ),
    )
    p.add_argument("--days", type=float, default=None, metavar="N", help="days of history [7]")
    p.add_argument("--db", default=DEFAULT_DB, metavar="PATH", help=f"database [{DEFAULT_DB}]")
    p.add_argument("--host", default="127.0.0.1", metavar="HOST", help="listen address")
    p.add_argument("--port", type=int, default=8050, metavar="N", help="listen port [8050]")
    p.add_argument(
        "--rebuild", action="store_true", help="delete the demo database and generate it again"
    )
    p.add_argument(
        "--seed", type=int, default=None, metavar="S", help=f"random seed [{DEFAULT_SEED}]"
    )
    p.add_argument(
        "--rate-scale",
        type=float,
        default=None,
        metavar="X",
        help="multiply every app's traffic by X [1]",
    )
    p.add_argument(
        "--log-level",
        default="warning",
        choices=("debug", "info", "warning", "error"),
        help="log level [warning]",
    )
    return p


def run(args: argparse.Namespace) -> int:
    """Run the demo until SIGINT/SIGTERM; returns the exit code (0 after a clean stop)."""
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    options = DemoOptions.from_args(args)
    demo = Demo(options)
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in _SIGNALS}
    try:
        demo.start()
        while not stop.wait(0.5):
            if demo.failed is not None:
                break
    finally:
        # A second Ctrl-C while stopping quits at once; the state file already says whether
        # the history is complete, so nothing is left ambiguous.
        for sig in _SIGNALS:
            signal.signal(sig, _quit_now)
        demo.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if demo.failed is not None:
        raise DemoError(f"demo stopped: {demo.failed}")
    return 0


_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _quit_now(*_: object) -> None:
    sys.stderr.write("\ninferledger demo: quitting at once\n")
    os._exit(130)


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m inferledger.demo ...` (the same as `inferledger demo ...`)."""
    parser = argparse.ArgumentParser(prog="inferledger")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["demo", *(sys.argv[1:] if argv is None else argv)])
    from inferledger.cli import report_errors  # cli imports this module: import late

    return report_errors(lambda: run(args))


# --- options and state --------------------------------------------------------------------


@dataclass(frozen=True)
class DemoOptions:
    db: Path
    host: str = "127.0.0.1"
    port: int = 8050
    days: float | None = None  # None: DEFAULT_DAYS, or what an existing database was built with
    seed: int | None = None
    rate_scale: float | None = None
    rebuild: bool = False
    log_level: str = "warning"

    def __post_init__(self) -> None:
        if self.days is not None and not 0 < self.days <= MAX_DAYS:
            raise DemoError(
                f"--days must be more than 0 and at most {MAX_DAYS:g}, got {self.days:g}"
            )
        if self.rate_scale is not None and not (
            math.isfinite(self.rate_scale) and 0 < self.rate_scale <= 100
        ):
            raise DemoError(
                f"--rate-scale must be more than 0 and at most 100, got {self.rate_scale:g}"
            )
        if not 1 <= self.port <= 65535:
            raise DemoError(f"--port must be from 1 to 65535, got {self.port}")

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> DemoOptions:
        return cls(
            db=Path(args.db),
            host=args.host,
            port=args.port,
            days=args.days,
            seed=args.seed,
            rate_scale=args.rate_scale,
            rebuild=args.rebuild,
            log_level=args.log_level,
        )


@dataclass(frozen=True)
class Region:
    """A stretch of history still to load (Unix seconds); `end` is the start of that run's
    live traffic."""

    start: float
    end: float
    traces_done: bool = False


@dataclass
class DemoState:
    """What `<db>.demo.json` records about a demo database: how it was generated, and which
    history is not fully loaded yet (so an interrupted load is resumed, never mistaken for a
    complete one)."""

    path: Path
    seed: int = DEFAULT_SEED
    days: float = DEFAULT_DAYS
    rate_scale: float = 1.0
    workload: str = ""  # fingerprint of the workload and code that generated the data
    regions: list[Region] = field(default_factory=list)  # newest first
    live_until: float = 0.0  # every live span and scrape before this is stored
    spans: int = 0
    samples: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def status(self) -> str:
        return "loading" if self.regions else "complete"

    @classmethod
    def load(cls, path: Path) -> DemoState | None:
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise DemoError(f"{path} is unreadable ({exc}); pass --rebuild to start over") from None
        try:
            if doc["format"] != STATE_FORMAT:
                raise ValueError("format")
            return cls(
                path,
                seed=int(doc["seed"]),
                days=float(doc["days"]),
                rate_scale=float(doc["rate_scale"]),
                workload=str(doc["workload"]),
                regions=[
                    Region(float(r["start"]), float(r["end"]), bool(r["traces_done"]))
                    for r in doc["regions"]
                ],
                live_until=float(doc["live_until"]),
                spans=int(doc["spans"]),
                samples=int(doc["samples"]),
            )
        except (KeyError, TypeError, ValueError):
            raise DemoError(
                f"{path} is not a demo state file; pass --rebuild to start over"
            ) from None

    def save(self, **changes: Any) -> None:
        with self._lock:
            for name, value in changes.items():
                setattr(self, name, value)
            doc = {
                "format": STATE_FORMAT,
                "status": self.status,
                "seed": self.seed,
                "days": self.days,
                "rate_scale": self.rate_scale,
                "workload": self.workload,
                "regions": [
                    {"start": r.start, "end": r.end, "traces_done": r.traces_done}
                    for r in self.regions
                ],
                "live_until": self.live_until,
                "spans": self.spans,
                "samples": self.samples,
                "updated_at": datetime.now(UTC).isoformat(timespec="seconds"),
            }
            tmp = self.path.with_name(self.path.name + ".tmp")
            tmp.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
            os.replace(tmp, self.path)

    def add_counts(self, spans: int, samples: int) -> None:
        with self._lock:
            self.spans += spans
            self.samples += samples


def workload_fingerprint() -> str:
    """Changes when the shipped workload or InferLedger's version does: data generated by
    another version would not match what this one regenerates when it resumes a load."""
    from importlib import resources

    from inferledger import __version__

    text = resources.files("models").joinpath("data", "workload.yaml").read_bytes()
    return hashlib.sha256(text + __version__.encode()).hexdigest()[:16]


def _url_host(host: str) -> str:
    """A listen address as a URL host: IPv6 in brackets; the wildcard as loopback."""
    if host in ("0.0.0.0", "::", ""):
        return "127.0.0.1"
    return f"[{host}]" if ":" in host else host


def state_path(db: Path) -> Path:
    return db.with_name(db.name + ".demo.json")


def remove_database(db: Path, spool_dir: Path) -> list[str]:
    """Delete a database, its WAL, its spool and its demo state; returns what was removed."""
    removed = []
    for p in (db, Path(f"{db}.wal"), state_path(db)):
        if p.exists():
            p.unlink()
            removed.append(str(p))
    if spool_dir.exists():
        shutil.rmtree(spool_dir)
        removed.append(str(spool_dir))
    return removed


# --- progress -----------------------------------------------------------------------------


class Progress:
    """A one-line progress bar on a terminal; a line every few seconds elsewhere."""

    WIDTH = 24

    def __init__(self, stream: TextIO, total_units: float) -> None:
        self.stream = stream
        self.tty = bool(getattr(stream, "isatty", lambda: False)())
        self.total = max(total_units, 1e-9)
        self.done = 0.0
        self.phase = "traces"
        self.spans = 0
        self.samples = 0
        self.started = time.monotonic()
        self._last = 0.0
        self._lock = threading.Lock()

    def advance(self, units: float = 0.0, *, spans: int = 0, samples: int = 0) -> None:
        with self._lock:
            self.done = min(self.total, self.done + units)
            self.spans += spans
            self.samples += samples
        self.draw()

    def draw(self, force: bool = False) -> None:
        with self._lock:  # called from the sender threads too
            self._draw(force)

    def _draw(self, force: bool) -> None:
        now = time.monotonic()
        if not force and now - self._last < (0.25 if self.tty else 10.0):
            return
        self._last = now
        frac = self.done / self.total
        filled = int(frac * self.WIDTH)
        bar = "█" * filled + "░" * (self.WIDTH - filled)
        elapsed = now - self.started
        eta = ""
        if 0.02 < frac < 1:
            eta = f"  ~{_duration(elapsed * (1 - frac) / frac)} left"
        text = (
            f"history {bar} {frac:4.0%}  {self.phase}  {self.spans:,} spans  "
            f"{self.samples:,} samples  {_duration(elapsed)}{eta}"
        )
        if self.tty:
            self.stream.write("\r\033[K" + text)
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def finish(self, message: str) -> None:
        with self._lock:
            if self.tty:
                self.stream.write("\r\033[K")
            self.stream.write(message + "\n")
            self.stream.flush()


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


# --- sending ------------------------------------------------------------------------------


class SpanSender:
    """POSTs OTLP protobuf bodies to /v1/traces from a few threads, like several exporters;
    retries a 503 after its Retry-After, as the OTLP exporters do."""

    def __init__(self, url: str, stop: threading.Event, *, workers: int, max_pending: int) -> None:
        import requests

        self._requests = requests
        self.url = url
        self.stop = stop
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="demo-otlp")
        self._slots = threading.BoundedSemaphore(max_pending)
        self._local = threading.local()
        self._pending: set[Future[None]] = set()
        self._lock = threading.Lock()
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
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceResponse,
        )

        session = getattr(self._local, "session", None)
        if session is None:
            session = self._local.session = self._requests.Session()
            session.trust_env = False  # loopback: never through a proxy from the environment
        delay = 0.5
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
                raise
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

    def drain(self) -> None:
        """Wait until every queued request is answered."""
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


class MetricReplayer:
    """Stores rendered pages through Scraper.ingest_text, a few at a time (parsing one page
    overlaps committing another)."""

    def __init__(self, scraper: Any, stop: threading.Event, *, workers: int) -> None:
        self.scraper = scraper
        self.stop = stop
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="demo-metrics")
        self._slots = threading.BoundedSemaphore(workers * 4)
        self._pending: set[Future[Any]] = set()
        self._lock = threading.Lock()
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

    def drain(self) -> None:
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


# --- the demo -----------------------------------------------------------------------------


class Demo:
    """The service, plus the threads that load history and keep live traffic flowing."""

    def __init__(
        self,
        options: DemoOptions,
        *,
        out: TextIO | None = None,
        err: TextIO | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.options = options
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.clock = clock
        self.stop_event = threading.Event()
        self.history_done = threading.Event()
        self.failed: str | None = None
        self.service: Service | None = None
        self.state: DemoState | None = None
        self.t0 = 0.0  # where this run's live traffic starts (Unix seconds, a scrape time)
        self.url = ""
        self._threads: list[threading.Thread] = []
        self._http: threading.Thread | None = None
        self._http_error: BaseException | None = None
        self._closers: list[Callable[[], None]] = []
        self._stopped = False

    # -- lifecycle --------------------------------------------------------------------------
    def start(self) -> Demo:
        from inferledger.server import Service
        from inferledger.settings import ScrapeTarget, load_settings
        from models.deployments import deployments_from_workload
        from models.workload import load_workload
        from models.workload.feed import scrape_targets
        from models.workload.segments import SegmentSource, plan_segments

        opts = self.options
        settings = load_settings(
            cli={
                "db": str(opts.db),
                "host": opts.host,
                "port": opts.port,
                "log_level": opts.log_level,
            }
        )
        spool = Path(settings["ingest.spool_dir"] or f"{settings['db']}.spool")
        self.t0 = t0 = math.floor(self.clock() / SCRAPE_INTERVAL_S) * SCRAPE_INTERVAL_S
        self.state = state = self._prepare(spool, t0)
        config = load_workload()
        # The simulated deployments are configured, as a real one would be (docs/deployments.md).
        settings = settings.replace(deployments=deployments_from_workload(config))
        self.service = Service(settings).start()
        sign_in = self._demo_admin(settings)
        self._serve()
        self.url = f"http://{opts.host}:{opts.port}"
        self._wait_ready()
        if state.rate_scale != 1.0:
            config = config.scaled(state.rate_scale)
        source = SegmentSource(config, state.seed)
        targets = {
            t.name: ScrapeTarget(t.name, t.url, SCRAPE_INTERVAL_S, 10.0, t.kind, t.deployment)
            for t in scrape_targets(source.config)
        }
        # The newest history (if it ends now) and the first live hour are one simulation.
        newest = state.regions[0] if state.regions and state.regions[0].end == t0 else None
        live_first = plan_segments(newest.start if newest else t0, t0)[1]
        loader = _HistoryLoader(self, source, targets, t0, live_first)
        feeder = _LiveFeeder(self, source, targets, live_first, t0)
        self._closers += [loader.close, feeder.close]
        for name, target in (("demo-history", loader.run), ("demo-live", feeder.run)):
            thread = threading.Thread(target=self._guard(target), name=name, daemon=True)
            thread.start()
            self._threads.append(thread)
        self._print(
            f"ready: the dashboard is at {self.url}/ — "
            + (
                "history loads in the background (newest first) while live traffic continues"
                if state.regions
                else "live traffic continues"
            )
            + sign_in
            + "; Ctrl-C stops"
        )
        return self

    def _demo_admin(self, settings: Any) -> str:
        """The ready line's sign-in part: a new demo admin's password (printed once, stored
        only as a hash), or how to reset it."""
        from models.users import DEMO_ADMIN, ensure_demo_admin, get_user

        if not settings["auth.enabled"]:
            return ""
        assert self.service is not None
        storage = self.service.storage
        password = ensure_demo_admin(storage)
        if password is not None:
            return f"; sign in as {DEMO_ADMIN} with password {password} (shown once)"
        db = self.options.db
        if get_user(storage, DEMO_ADMIN) is not None:
            return (
                f"; sign in as {DEMO_ADMIN} (the demo admin exists; to reset its password, stop "
                f"the demo and run `inferledger users passwd {DEMO_ADMIN} --db {db}`)"
            )
        return f"; sign in with a user of `inferledger users list --db {db}`"

    def _prepare(self, spool: Path, t0: float) -> DemoState:
        """Start, resume, extend or rebuild the demo database; returns its state, saved."""
        opts = self.options
        db = opts.db
        spath = state_path(db)
        fingerprint = workload_fingerprint()
        if opts.rebuild:
            removed = remove_database(db, spool)
            self._print(
                f"--rebuild: removed {', '.join(removed)}"
                if removed
                else "--rebuild: nothing to remove"
            )
        state = DemoState.load(spath)
        if state is not None and not db.exists():
            spath.unlink()
            state = None
        if db.exists() and state is None:
            raise DemoError(
                f"{db} exists but was not made by `inferledger demo` (no {spath.name}); "
                "pass --rebuild to replace it, or choose another --db"
            )
        if state is not None and state.workload != fingerprint:
            self._print(
                f"{db} was generated by another version of the demo workload; rebuilding it"
            )
            remove_database(db, spool)
            state = None
        if state is None:
            db.parent.mkdir(parents=True, exist_ok=True)
            days = opts.days if opts.days is not None else DEFAULT_DAYS
            state = DemoState(
                spath,
                seed=opts.seed if opts.seed is not None else DEFAULT_SEED,
                days=days,
                rate_scale=opts.rate_scale if opts.rate_scale is not None else 1.0,
                workload=fingerprint,
                regions=[Region(t0 - days * DAY_S, t0)],
                live_until=t0,
            )
            self._print(
                f"inferledger demo: generating {days:g} days of history into {db} "
                f"(seed {state.seed}, traffic x{state.rate_scale:g})"
            )
            state.save()
            return state
        notes = []
        if state.regions:
            notes.append("resuming the history load the last run did not finish")
        start = max(state.live_until, t0 - state.days * DAY_S)
        if start < t0:
            state.regions.insert(0, Region(start, t0))
            notes.append(f"filling the {_duration(t0 - start)} since it last ran")
        asked = {"seed": opts.seed, "days": opts.days, "rate_scale": opts.rate_scale}
        differs = [
            f"--{k.replace('_', '-')} {v:g}"
            for k, v in asked.items()
            if v is not None and v != getattr(state, k)
        ]
        if differs:
            notes.append(f"ignoring {', '.join(differs)} (pass --rebuild to apply)")
        self._print(
            f"inferledger demo: reusing {db} (seed {state.seed}, {state.days:g} days, "
            f"traffic x{state.rate_scale:g})" + ("; " + "; ".join(notes) if notes else "")
        )
        state.save(live_until=t0)
        return state

    def _serve(self) -> None:
        assert self.service is not None
        service = self.service

        def serve() -> None:
            try:
                service.serve_forever(install_signal_handlers=False)
            except BaseException as exc:  # reported by _wait_ready / stop
                self._http_error = exc

        self._http = threading.Thread(target=serve, name="demo-http", daemon=True)
        self._http.start()

    def _wait_ready(self) -> None:
        """Wait until this service is listening (its own socket, not whatever else answers on
        the port) and ready."""
        import requests

        assert self.service is not None
        deadline = time.monotonic() + 30
        while not self.service.listen_addresses:
            if self._http is not None and not self._http.is_alive():
                self.stop()
                raise DemoError(f"cannot serve on {self.url}: {self._http_error}")
            if time.monotonic() > deadline:
                self.stop()
                raise DemoError(f"the service did not start listening on {self.url} in 30 s")
            time.sleep(0.02)
        host, port = self.service.listen_addresses[0]
        self.url = f"http://{_url_host(host)}:{port}"
        while time.monotonic() < deadline:
            try:
                if requests.get(self.url + "/readyz", timeout=1).status_code == 200:
                    return
            except requests.ConnectionError:
                pass
            time.sleep(0.05)
        self.stop()
        raise DemoError(f"the service did not answer on {self.url} within 30 s")

    def _guard(self, target: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                target()
            except Exception as exc:
                if self.stop_event.is_set():
                    return  # stopping: the service may be gone under it; nothing is lost
                log.exception("demo thread failed")
                self.failed = self.failed or f"{type(exc).__name__}: {exc}"
                self.stop_event.set()
                self.history_done.set()

        return run

    def wait_history(self, timeout_s: float | None = None) -> bool:
        """Wait until the history is loaded (or the demo stopped); True when loaded."""
        self.history_done.wait(timeout_s)
        return self.state is not None and self.state.status == "complete"

    def stop(self) -> None:
        """Stop feeding, drain what was sent, stop the service. Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        self.stop_event.set()
        self.history_done.set()  # wake wait_history(): the history will not progress now
        for thread in self._threads:
            # A thread busy simulating cannot be interrupted; it holds no resources, so do not
            # wait long for it (daemon threads end with the process).
            thread.join(5)
        for close in self._closers:
            close()
        self._closers = []
        if self._threads and self.state is not None and self.state.status != "complete":
            self._print(
                f"stopped before the history was loaded: {self.state.path.name} marks "
                f"{self.options.db} incomplete; the next `inferledger demo` finishes loading it "
                "(or pass --rebuild to start over)"
            )
        if self.service is not None:
            self.service.request_stop()
            if self._http is not None:
                self._http.join(60)
            self.service.stop()
            self.service = None

    def _print(self, text: str) -> None:
        self.out.write(text + "\n")
        self.out.flush()


class _HistoryLoader:
    """Loads the state's regions: every segment's traces (newest first), then its metrics.

    Resumable: a region's traces are marked done once all were accepted (sending them again
    would be harmless: a span received twice is stored once), and a scrape already stored is
    skipped, so a run that stops half-way leaves nothing the next run cannot finish."""

    def __init__(
        self,
        demo: Demo,
        source: SegmentSource,
        targets: dict[str, ScrapeTarget],
        t0: float,
        shared: Segment,
    ) -> None:
        assert demo.service is not None and demo.state is not None
        self.demo = demo
        self.source = source
        self.targets = targets
        self.t0 = t0
        self.shared = shared  # the segment live traffic continues
        stop = demo.stop_event
        self.sender = SpanSender(
            demo.url + "/v1/traces", stop, workers=HISTORY_SENDERS, max_pending=HISTORY_SENDERS * 2
        )
        self.replayer = MetricReplayer(demo.service.scraper, stop, workers=HISTORY_METRIC_WORKERS)
        # Progress units: a day of traces weighs 1, a day of scrapes TRACE_TO_METRIC_COST
        # (roughly what each costs: metrics dominate).
        total = 0.0
        for r in demo.state.regions:
            total += (r.end - r.start) / DAY_S * ((0 if r.traces_done else 1) + METRIC_COST)
        self.progress = Progress(demo.err, total)

    def close(self) -> None:
        self.sender.close()
        self.replayer.close()

    def _check(self) -> bool:
        if self.sender.error or self.replayer.error:
            raise DemoError(self.sender.error or self.replayer.error or "")
        return not self.demo.stop_event.is_set()

    def _segment(self, seg: Segment) -> SimulatedSegment:
        return self.source.get(seg)

    def _spans_stored(self, spans: int) -> None:
        assert self.demo.state is not None
        self.demo.state.add_counts(spans, 0)
        self.progress.advance(spans=spans)

    def _samples_stored(self, samples: int) -> None:
        assert self.demo.state is not None
        self.demo.state.add_counts(0, samples)
        self.progress.advance(samples=samples)

    def run(self) -> None:
        state = self.demo.state
        assert state is not None
        if not state.regions:
            self.demo.history_done.set()
            return
        shared = any(r.end == self.t0 for r in state.regions)
        if shared:
            self.source.acquire(self.shared)
        try:
            self._load()
        finally:
            if shared:
                self.source.release(self.shared)

    def _load(self) -> None:
        from models.workload.segments import plan_segments

        demo = self.demo
        state = demo.state
        assert state is not None and demo.service is not None
        started = time.monotonic()
        self.progress.draw(force=True)
        for k, region in enumerate(state.regions):
            if region.traces_done:
                continue
            for seg in plan_segments(region.start, region.end)[0]:
                if not self._send_traces(self._segment(seg), seg, region.end):
                    return
            self.sender.drain()
            if not self._check():
                return
            regions = list(state.regions)
            regions[k] = replace(region, traces_done=True)
            state.save(regions=regions)
        self.progress.phase = "metrics"
        for region in state.regions:
            for seg in plan_segments(region.start, region.end)[0]:
                if not self._replay_metrics(seg, region.end):
                    return
        self.replayer.drain()
        self.sender.drain()
        if not self._check():
            return
        demo.service.ingestor.flush(600)
        state.save(regions=[])
        demo.history_done.set()
        self.progress.finish(
            f"history loaded: {self.sender.spans:,} spans and {self.replayer.samples:,} samples "
            f"({self.replayer.scrapes:,} scrapes) in {_duration(time.monotonic() - started)}"
        )

    def _send_traces(self, simulated: SimulatedSegment, seg: Segment, region_end: float) -> bool:
        # Attempts whose root span ended before the region's end are history (later ones were
        # live traffic's), sent an hour at a time, newest first; the oldest window takes
        # everything before it too.
        upper = min(region_end, simulated.last_end_unix_s + 1.0)
        weight = (min(seg.end, region_end) - seg.start) / DAY_S
        whole = max(upper - seg.start, 1.0)
        end = upper
        while True:
            start = end - HISTORY_WINDOW_S
            oldest = start <= seg.start
            for req, n in simulated.export_requests(-math.inf if oldest else start, end):
                if not self._check():
                    return False
                self.sender.submit(req.SerializeToString(), n, self._spans_stored)
            self.progress.advance(weight * min(end - max(start, seg.start), whole) / whole)
            if oldest:
                return self._check()
            end = start

    def _replay_metrics(self, seg: Segment, region_end: float) -> bool:
        from models.workload.feed import ticks

        assert self.demo.service is not None
        storage = self.demo.service.storage
        end = min(seg.end, region_end)
        pages: ScrapePages | None = None
        while end > seg.start:
            start = max(seg.start, end - HISTORY_WINDOW_S)
            stored = {
                (target, round(at))
                for target, at in storage.fetchall(
                    "select target, epoch(ts) from scrapes where ts >= ? and ts < ?",
                    [datetime.fromtimestamp(start, UTC), datetime.fromtimestamp(end, UTC)],
                )
            }
            for at in ticks(start, end).tolist():
                if all((name, round(at)) in stored for name in self.targets):
                    continue
                if pages is None:  # simulated only when something is left to replay
                    # Keep the pages only: the segment's tasks and records can go.
                    pages = self._segment(seg).scrape_pages()
                for target, text in pages.pages(at):
                    if (target.name, round(at)) in stored:
                        continue
                    if not self._check():
                        return False
                    self.replayer.submit(self.targets[target.name], text, at, self._samples_stored)
            self.progress.advance((end - start) / DAY_S * METRIC_COST)
            end = start
        return self._check()


class _LiveFeeder:
    """Sends what the simulated company does as the wall clock passes it."""

    def __init__(
        self,
        demo: Demo,
        source: SegmentSource,
        targets: dict[str, ScrapeTarget],
        first: Segment,
        t0: float,
    ) -> None:
        assert demo.service is not None
        self.demo = demo
        self.source = source
        self.targets = targets
        self.first = first
        self.t0 = t0
        stop = demo.stop_event
        self.sender = SpanSender(demo.url + "/v1/traces", stop, workers=2, max_pending=8)
        self.replayer = MetricReplayer(demo.service.scraper, stop, workers=2)

    def close(self) -> None:
        # Live data already counted in live_until: let it reach the service before it stops.
        self.sender.drain()
        self.replayer.drain()
        self.sender.close()
        self.replayer.close()

    def run(self) -> None:
        from models.workload.segments import Segment

        demo = self.demo
        state = demo.state
        assert state is not None
        stop = demo.stop_event
        active: list[tuple[Segment, SimulatedSegment]] = [
            (self.first, self.source.acquire(self.first))
        ]
        span_mark = self.t0
        next_tick = self.t0
        while not stop.is_set():
            now = demo.clock()
            last_seg, _ = active[-1]
            if last_seg.end - now < LIVE_LEAD_S:
                nxt = Segment(last_seg.end, last_seg.end + LIVE_SEGMENT_S)
                active.append((nxt, self.source.get(nxt)))
                continue
            for _, segment in active:
                for req, n in segment.export_requests(span_mark, now):
                    self.sender.submit(req.SerializeToString(), n, self._count_spans)
            span_mark = now
            while next_tick <= now and not stop.is_set():
                if not self._scrape(active, next_tick):
                    break
                next_tick += SCRAPE_INTERVAL_S
            self.replayer.drain()
            if self.sender.error or self.replayer.error:
                raise DemoError(self.sender.error or self.replayer.error or "")
            state.save(live_until=next_tick)
            # Segments whose time and tails have passed are done.
            while (
                len(active) > 1
                and active[0][0].end <= now
                and (active[0][1].last_end_unix_s < span_mark)
            ):
                if active[0][0] == self.first:
                    self.source.release(self.first)
                active.pop(0)
            wait = min(LIVE_TICK_S, max(0.0, next_tick - demo.clock())) or LIVE_TICK_S
            stop.wait(wait)

    def _scrape(self, active: list[tuple[Segment, SimulatedSegment]], at: float) -> bool:
        """Store every target's page at `at`; False when stopping before all were queued."""
        assert self.demo.service is not None and self.demo.state is not None
        # A page the previous run stored just before it stopped is not stored twice.
        stored = {
            name
            for (name,) in self.demo.service.storage.fetchall(
                "select target from scrapes where ts = ?", [datetime.fromtimestamp(at, UTC)]
            )
        }
        state = self.demo.state
        for seg, simulated in active:
            if seg.start <= at < seg.end:
                for target, text in simulated.pages(at):
                    if target.name in stored:
                        continue
                    if not self.replayer.submit(
                        self.targets[target.name], text, at, lambda k: state.add_counts(0, k)
                    ):
                        return False
                return True
        raise DemoError(f"no simulated segment covers {at}")  # segments are prepared ahead

    def _count_spans(self, spans: int) -> None:
        assert self.demo.state is not None
        self.demo.state.add_counts(spans, 0)


if __name__ == "__main__":
    sys.exit(main())
