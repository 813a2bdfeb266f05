"""`Demo`: the real service on a real port, plus the two threads that feed it.

`start()` prepares the database (start, resume, extend or rebuild it, per the state file),
starts the service `inferledger serve` runs, waits until it answers on its own socket, then
starts the history loader (history.py) and the live feeder (live.py) on one shared `Feed`.
`stop()` stops feeding, drains what was sent and stops the service; a thread that fails stops
the demo and says why in `failed`.
"""

from __future__ import annotations

import logging
import math
import sys
import threading
import time
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from inferledger.core.settings import ScrapeTarget
from inferledger.demo.history import HistoryLoader
from inferledger.demo.live import LiveFeeder
from inferledger.demo.progress import duration
from inferledger.demo.senders import Feed
from inferledger.demo.state import (
    DAY_S,
    DEFAULT_DAYS,
    DEFAULT_SEED,
    SCRAPE_INTERVAL_S,
    DemoError,
    DemoOptions,
    DemoState,
    Region,
    remove_database,
    state_path,
    workload_fingerprint,
)
from inferledger.settings import load_settings
from ledger.users import DEMO_ADMIN, ensure_demo_admin, get_user
from models.deployment_config import deployments_from_workload

if TYPE_CHECKING:
    from inferledger.server import Service

log = logging.getLogger(__name__)
#: the budgets and rules a demo loads as `alerts.file` (they watch its planted problems)
DEMO_ALERTS_FILE = Path(str(resources.files("models").joinpath("data", "demo-alerts.yaml")))


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
        self.loader: HistoryLoader | None = None  # the history load of this run, once started
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
        # The service (~0.8 s: Dash, DuckDB) and the simulator (numpy) load when the demo
        # starts, not with the CLI's parser, which imports this module for every command.
        from inferledger.server import Service
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
        # The demo's budgets and alert rules (models/data/demo-alerts.yaml), unless the user
        # configured an alerts file of their own.
        if not settings["alerts.file"]:
            settings = settings.replace(alerts__file=str(DEMO_ALERTS_FILE))
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
        feed = Feed(
            service=self.service,
            url=self.url,
            state=state,
            source=source,
            targets=targets,
            t0=t0,
            live_first=plan_segments(newest.start if newest else t0, t0)[1],
            stop=self.stop_event,
        )
        self.loader = loader = HistoryLoader(feed, done=self.history_done, err=self.err)
        feeder = LiveFeeder(feed, clock=self.clock)
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
            notes.append(f"filling the {duration(t0 - start)} since it last ran")
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
        import requests  # ~40 ms: loaded when the demo starts, not with the CLI's parser

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
            except (requests.ConnectionError, requests.Timeout):  # a busy machine answers late
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


def _url_host(host: str) -> str:
    """A listen address as a URL host: IPv6 in brackets; the wildcard as loopback."""
    if host in ("0.0.0.0", "::", ""):
        return "127.0.0.1"
    return f"[{host}]" if ":" in host else host
