"""`inferledger serve`: one process, one port — the Dash UI, the ingest endpoints, health,
our own /metrics, and the scheduler — over the one storage gateway.

Threads, never worker processes: DuckDB allows one read-write process per file, and the
in-process scheduler must run once (../shared/reference/stack-notes.md, "Serving").
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from typing import Any

import flask
from apscheduler.schedulers.background import BackgroundScheduler

from app.api import register_api
from app.auth import observe_sign_ins
from app.context import CONSOLE_KEY
from app.downloads import register_downloads
from app.factory import create_app
from inferledger.alerting import Alerting
from inferledger.core.errors import InferLedgerError, SettingsError, StorageError
from inferledger.core.http_server import Deadlines, WaitressRunner, wait_until
from inferledger.core.service_metrics import ServiceMetrics
from inferledger.core.settings import Settings
from inferledger.core.storage import Storage
from ingest.otlp_receiver import TraceReceiver
from ingest.outcome_receiver import MAX_BODY_BYTES as OUTCOMES_MAX_BODY_BYTES
from ingest.outcome_receiver import OutcomeReceiver
from ingest.scraper import Scraper, scrape_executors
from ingest.span_ingestor import SpanIngestor
from ingest.spool import Spool
from ledger.alerts_file import sync_alerts_file
from ledger.deployments import sync_configured
from ledger.efficiency import seed_slo_targets_if_empty
from ledger.marts import Refresher
from ledger.price_book import seed_if_empty
from ledger.scheduled_exports import ScheduledExports
from models.alert_config import ConfigError

log = logging.getLogger(__name__)


def prepare_reference_data(storage: Storage, settings: Settings) -> None:
    """What the cost model needs besides telemetry, at every open: the configured deployments,
    and the price book and SLO targets seeded into a database that never had them, and the
    alerts file (alerts.file) applied."""
    sync_configured(storage, settings["deployments"])
    seed_if_empty(storage, settings["prices.file"] or None)
    seed_slo_targets_if_empty(storage)
    if settings["alerts.file"]:
        # Budgets, rules and channels as code (issue #12): a bad file stops the start with
        # its one-line message, like other bad config; nothing of it is written.
        try:
            sync_alerts_file(storage, settings["alerts.file"])
        except ConfigError as exc:
            raise SettingsError(str(exc)) from None


_DRAIN_TIMEOUT_S = 15.0

#: On every response (issue #17): no framing (clickjacking), no content sniffing, and no
#: referrer to other sites (our URLs carry filters such as team names). Same-origin requests
#: keep the full referrer: Dash's /_dash-layout reads the page's filters from it.
_COMMON_HEADERS = {
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}
#: For what is not a page (JSON, metrics, assets): nothing may run or load from it.
_NON_PAGE_CSP = "default-src 'none'; frame-ancestors 'none'; base-uri 'none'"


def page_csp(script_hashes: Iterable[str]) -> str:
    """The Content-Security-Policy of HTML pages. Scripts only from us, plus Dash's inline
    renderer start-up by hash (Dash.csp_hashes): no 'unsafe-inline' or 'unsafe-eval' for
    scripts. Styles need 'unsafe-inline': Plotly and the dropdowns insert <style> elements at
    run time. Images may be data:/blob: URLs (Plotly's icons and PNG export)."""
    return "; ".join(
        (
            "default-src 'self'",
            "script-src 'self' " + " ".join(script_hashes),
            "style-src 'self' 'unsafe-inline'",
            "img-src 'self' data: blob:",
            "font-src 'self' data:",
            "connect-src 'self'",
            "object-src 'none'",
            "base-uri 'self'",
            "form-action 'self'",
            "frame-ancestors 'none'",
        )
    )


class _CountedBody:
    """A WSGI response body that calls `done` once, when the server closes it (or it fails)."""

    def __init__(self, body: Iterable[bytes], done: Callable[[], None]) -> None:
        self._body = body
        self._done: Callable[[], None] | None = done

    def __iter__(self) -> Iterator[bytes]:
        return iter(self._body)

    def close(self) -> None:
        try:
            close = getattr(self._body, "close", None)
            if close is not None:
                close()
        finally:
            done, self._done = self._done, None
            if done is not None:
                done()


class Service:
    """Everything `inferledger serve` runs, built from validated settings."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.metrics = ServiceMetrics()
        self.storage = Storage(
            settings["db"],
            read_timeout_s=settings["storage.read_timeout_s"],
            queue_max_units=settings["ingest.queue_max_spans"],
            memory_limit=settings["storage.memory_limit"],
            threads=settings["storage.threads"],
            checkpoint_threshold=settings["storage.checkpoint_threshold"],
            on_commit=lambda _units, seconds: self.metrics.write_commit_seconds.observe(seconds),
        )
        spool_dir = settings["ingest.spool_dir"] or f"{settings['db']}.spool"
        self.spool = Spool(spool_dir)
        self.ingestor = SpanIngestor(
            self.storage,
            self.spool,
            self.metrics,
            max_pending_spans=settings["ingest.queue_max_spans"],
            max_pending_bytes=settings["ingest.queue_max_bytes"],
            write_attempts=settings["ingest.write_attempts"],
        )
        self.receiver = TraceReceiver(
            self.ingestor,
            self.metrics,
            ingest_keys=settings["ingest.keys"],
            max_body_bytes=settings["ingest.max_body_bytes"],
            retry_after_s=settings["ingest.retry_after_s"],
            inflight_max_bytes=settings["ingest.queue_max_bytes"],
        )
        self.outcome_receiver = OutcomeReceiver(
            self.storage,
            self.metrics,
            ingest_keys=settings["ingest.keys"],
            max_body_bytes=min(OUTCOMES_MAX_BODY_BYTES, settings["ingest.max_body_bytes"]),
            retry_after_s=settings["ingest.retry_after_s"],
        )
        # Scrape jobs run on their own pool, one worker per target, so a slow or dead target
        # never delays another (ingest/scraper.py); other jobs use the default pool.
        self.scheduler = BackgroundScheduler(
            executors={
                "default": {"type": "threadpool", "max_workers": 4},
                **scrape_executors(settings["scrape.targets"]),
            },
            job_defaults={"coalesce": True, "max_instances": 1},
            timezone="UTC",
        )
        self.scraper = Scraper(self.storage, self.metrics, settings["scrape.max_bytes"])
        self.refresher = Refresher(
            self.storage,
            max_scrape_gap_ns=settings["ledger.max_scrape_gap_s"] * 1_000_000_000,
            metrics=self.metrics,
        )
        # Budgets and alert rules (issue #12): evaluation and notification delivery.
        self.alerting = Alerting(self.storage, settings)
        self.ready = threading.Event()
        self._inflight = 0
        self._inflight_lock = threading.Lock()
        self._stop = threading.Event()
        self._started = False
        self.dash_app: Any = None
        self._page_csp: str | None = None
        self.listen_addresses: list[tuple[str, int]] = []

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> Service:
        self.storage.open()
        prepare_reference_data(self.storage, self.settings)
        self.ingestor.start()
        self.metrics.bind_gauges(
            lambda: self.ingestor.pending_spans + self.storage.queue_depth, self.storage.size_bytes
        )
        self.dash_app = create_app(self.settings, self.storage)
        observe_sign_ins(self.dash_app, lambda result: self.metrics.sign_ins.labels(result).inc())
        self._add_routes(self.dash_app.server)
        self._schedule_jobs()
        self.scheduler.start()
        self._started = True
        self.ready.set()
        return self

    def _schedule_jobs(self) -> None:
        from ingest.scraper import Scraper

        targets = self.settings["scrape.targets"]
        if targets:
            self.scraper = Scraper(self.storage, self.metrics, self.settings["scrape.max_bytes"])
            self.scraper.schedule(self.scheduler, targets)
        interval = self.settings["ledger.refresh_interval_s"]
        if interval:
            # The first refresh runs at once, so a restarted server's marts catch up.
            self.scheduler.add_job(
                self.refresh_ledger,
                "interval",
                seconds=interval,
                id="ledger-refresh",
                next_run_time=datetime.now(UTC),
            )
        self.alerting.schedule(self.scheduler)
        # Scheduled exports of the analyst views (ledger/scheduled_exports.py, issue #14)
        ScheduledExports(
            self.storage, self.settings["exports.schedules"], self.settings["exports.timeout_s"]
        ).schedule(self.scheduler)

    def refresh_ledger(self) -> None:
        """The scheduled refresh of the cost marts; a failure is logged and retried next run."""
        try:
            self.refresher.refresh()
        except Exception:
            log.exception("ledger refresh failed; the next run retries the same hours")
            return
        # Evaluate the alert rules on the fresh data at once (a job of its own, so the caller
        # does not wait), not one alerts.interval_s later: data-to-notification latency is
        # then the refresh interval plus the refresh plus one evaluation.
        if self._started and self.alerting.enabled:
            self.scheduler.add_job(self.alerting.evaluate, name="alerts-after-refresh")

    def pause_refresh(self) -> bool:
        """Hold the scheduled ledger refresh (a refresh already running finishes). The demo's
        history load holds it: each 60-s refresh would re-read a day of freshly loaded data
        while the load runs, and the loader refreshes once when it is done. True if there was
        a scheduled refresh to hold."""
        if self.scheduler.get_job("ledger-refresh") is None:
            return False
        self.scheduler.pause_job("ledger-refresh")
        return True

    def resume_refresh(self) -> None:
        """Resume the scheduled ledger refresh held by pause_refresh (no-op once stopped)."""
        if self._started and self.scheduler.get_job("ledger-refresh") is not None:
            self.scheduler.resume_job("ledger-refresh")

    def stop(self) -> None:
        """Stop the scheduler, finish queued writes, checkpoint, close. Idempotent."""
        self.ready.clear()
        if not self._started:
            return
        self._started = False
        self.ingestor.stop()
        # Closing the scraper first ends scrapes in flight, so shutdown never waits on a slow
        # target (issue #17); the jobs it cuts short store nothing.
        self.scraper.close()
        self.scheduler.shutdown(wait=True)
        # Sends in flight finish (each within its timeout) before the database closes; a
        # notification cut short stays pending and is resent after the restart.
        self.alerting.close()
        # The SQL console's worker processes (app/pages/sql.py), when someone started them.
        console = self.dash_app.server.extensions.get(CONSOLE_KEY) if self.dash_app else None
        if console is not None:
            console.close()
        self.storage.close()

    # ------------------------------------------------------------------ HTTP
    def wsgi_app(self) -> Callable[..., Iterable[bytes]]:
        flask_app = self.dash_app.server

        def done() -> None:
            with self._inflight_lock:
                self._inflight -= 1

        def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
            with self._inflight_lock:
                self._inflight += 1
            try:
                body = flask_app(environ, start_response)
            except BaseException:
                done()
                raise
            # The count covers writing the body too: the server closes it after the last byte
            # (PEP 3333), and a streamed download is never held whole in memory.
            return _CountedBody(body, done)

        return app

    def _add_routes(self, server: flask.Flask) -> None:
        receiver = self.receiver

        def traces() -> flask.Response:
            req = flask.request
            resp = receiver.handle(req.method, req.headers, req.stream)
            return flask.Response(
                resp.body,
                status=resp.status,
                content_type=resp.content_type,
                headers=dict(resp.headers),
            )

        def outcomes() -> flask.Response:
            req = flask.request
            resp = self.outcome_receiver.handle(req.method, req.headers, req.stream)
            return flask.Response(
                resp.body,
                status=resp.status,
                content_type=resp.content_type,
                headers=dict(resp.headers),
            )

        def healthz() -> flask.Response:
            return self._plain("/healthz", 200, "ok\n")

        def readyz() -> flask.Response:
            if self.ready.is_set():
                return self._plain("/readyz", 200, "ready\n")
            return self._plain("/readyz", 503, "not ready\n")

        def metrics() -> flask.Response:
            return flask.Response(
                self.metrics.render(),
                status=200,
                content_type="text/plain; version=0.0.4; charset=utf-8",
            )

        server.add_url_rule(
            "/v1/traces",
            "otlp_traces",
            traces,
            methods=["GET", "POST", "PUT", "PATCH", "DELETE"],
        )
        server.add_url_rule(
            "/v1/outcomes",
            "outcomes",
            outcomes,
            methods=["GET", "POST", "PUT", "PATCH", "DELETE"],
        )
        server.add_url_rule("/healthz", "healthz", healthz)
        server.add_url_rule("/readyz", "readyz", readyz)
        server.add_url_rule("/metrics", "service_metrics", metrics)
        # GET /api/v1/budgets (per-user API tokens; app/api.py, issue #12)
        register_api(server, self.storage, base_url=self.settings["auth.public_url"])
        # GET /download/views/<name> (analysts' view exports; app/downloads.py, issue #14)
        register_downloads(server, self.storage, timeout_s=self.settings["exports.timeout_s"])
        server.after_request(self._security_headers)

    def _security_headers(self, resp: flask.Response) -> flask.Response:
        """Security headers on every response, the page policy on HTML (one place)."""
        for name, value in _COMMON_HEADERS.items():
            resp.headers.setdefault(name, value)
        if resp.mimetype == "text/html":
            # Hashed at the first page, once every page module has registered its inline
            # (clientside) scripts; Dash's own index adds them at its first render too.
            if self._page_csp is None:
                self._page_csp = page_csp(self.dash_app.csp_hashes())
            resp.headers["Content-Security-Policy"] = self._page_csp
        else:
            resp.headers.setdefault("Content-Security-Policy", _NON_PAGE_CSP)
        return resp

    def _plain(self, endpoint: str, status: int, text: str) -> flask.Response:
        self.metrics.http_requests.labels(endpoint, str(status)).inc()
        return flask.Response(text, status=status, content_type="text/plain; charset=utf-8")

    # ------------------------------------------------------------------ serving
    def serve_forever(self, install_signal_handlers: bool = True) -> int:
        """Serve until SIGTERM/SIGINT, then shut down cleanly; returns the exit code."""
        host, port = self.settings["host"], self.settings["port"]
        listen = [f"{host}:{port}"]
        if self.settings["otlp_port"]:
            listen.append(f"{host}:{self.settings['otlp_port']}")
        runner = WaitressRunner(
            self.wsgi_app(),
            # Slow or idle clients are dropped so they cannot fill the connection limit and
            # take health, UI and ingest offline (inferledger/core/http_server.py, issue #17).
            deadlines=Deadlines(
                header_timeout_s=self.settings["http.header_timeout_s"],
                request_timeout_s=self.settings["http.request_timeout_s"],
            ),
            on_close=lambda reason: self.metrics.http_connections_closed.labels(reason).inc(),
            connection_limit=self.settings["http.connection_limit"],
            listen=" ".join(listen),
            threads=self.settings["threads"],
            ident="inferledger",
            # waitress buffers bodies before the app runs, so it enforces a hard cap of its own:
            # 1 MiB above ours, so that a body just over the limit still gets the receiver's
            # OTLP-shaped 413, and a huge one a plain 413.
            max_request_body_size=self.settings["ingest.max_body_bytes"] + (1 << 20),
            # Typical OTLP requests (1-4 MB) stay in memory and are read in 256 KiB chunks:
            # waitress's defaults (8 KiB reads, spill to a file past 512 KiB) cost ~5 us/span.
            inbuf_overflow=8 << 20,
            recv_bytes=256 << 10,
            channel_timeout=120,
            clear_untrusted_proxy_headers=True,
        )
        self.listen_addresses = runner.addresses
        if install_signal_handlers:
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, lambda *_: self._stop.set())
        runner.start()
        for h, p in self.listen_addresses:
            log.info("InferLedger listening on http://%s:%d", h, p)
        print(
            "InferLedger serving on "
            + ", ".join(f"http://{h}:{p}" for h, p in self.listen_addresses)
            + f" (database {self.settings['db']})",
            flush=True,
        )
        try:
            while not self._stop.wait(0.5):
                if not runner.alive:
                    log.error("HTTP loop stopped unexpectedly")
                    break
        finally:
            # Stop accepting, let requests in flight finish, then end the loop.
            self.ready.clear()
            runner.stop_accepting()
            if not wait_until(lambda: not self._inflight, _DRAIN_TIMEOUT_S):
                log.warning("%d request(s) still running at shutdown", self._inflight)
            runner.close()
            self.stop()
        log.info("InferLedger stopped cleanly")
        return 0

    def request_stop(self) -> None:
        self._stop.set()


def serve(settings: Settings) -> int:
    logging.basicConfig(
        level=settings["log_level"].upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    service = Service(settings)
    try:
        service.start()
    except InferLedgerError:
        service.stop()
        service.storage.close()  # opened before a bad alerts file was found (idempotent)
        raise
    return service.serve_forever()


def serve_in_thread(
    settings: Settings, before_serving: Callable[[Service], object] | None = None
) -> tuple[Service, threading.Thread, str]:
    """Start a Service and serve it from a daemon thread (tests, benchmarks, screenshots);
    returns once it listens, with its URL. `before_serving` may hook the Flask app first.
    Stop it with ``service.request_stop()`` and join the thread."""
    service = Service(settings).start()
    if before_serving is not None:
        before_serving(service)
    thread = threading.Thread(
        target=service.serve_forever, kwargs={"install_signal_handlers": False}, daemon=True
    )
    thread.start()
    if not wait_until(lambda: bool(service.listen_addresses) or not thread.is_alive(), 30):
        raise StorageError("the service did not start listening in 30 s")
    if not service.listen_addresses:
        raise StorageError(f"cannot serve on {settings['host']}:{settings['port']}")
    host, port = service.listen_addresses[0]
    return service, thread, f"http://{'127.0.0.1' if host in ('0.0.0.0', '::') else host}:{port}"
