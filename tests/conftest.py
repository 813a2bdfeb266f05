"""Shared fixtures: real DuckDB files in temporary folders and real `inferledger serve`
processes on loopback. Nothing of ours is mocked."""

from __future__ import annotations

import contextlib
import csv
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import urlencode

import pytest
import requests

from inferledger.browser_pages import CHROMIUM, CHROMIUM_ARGS
from inferledger.core.net import free_port
from inferledger.core.service_metrics import ServiceMetrics
from inferledger.core.storage import Storage
from ingest.scraper import Scraper
from ledger import users

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def storage(tmp_path: Path) -> Iterator[Storage]:
    st = Storage(tmp_path / "test.duckdb", read_timeout_s=10).open()
    try:
        yield st
    finally:
        st.close()


@dataclass
class ServerProcess:
    """A real `inferledger serve` child process."""

    db: Path
    port: int
    env: dict[str, str]
    args: list[str] = field(default_factory=list)
    proc: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 30.0) -> ServerProcess:
        assert self.log_path is not None
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "inferledger.cli",
                "serve",
                "--db",
                str(self.db),
                "--port",
                str(self.port),
                *self.args,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=self.env,
            cwd=ROOT,
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"server exited with {self.proc.returncode}:\n{self.log()}")
            try:
                if requests.get(self.url + "/readyz", timeout=1).status_code == 200:
                    return self
            except (requests.ConnectionError, requests.Timeout):
                pass
            time.sleep(0.1)
        raise AssertionError(f"server not ready after {timeout_s}s:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path else ""

    def terminate(self, timeout_s: float = 30.0) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError(f"server ignored SIGTERM:\n{self.log()}") from None
        return self.proc.returncode

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()


@pytest.fixture
def metrics() -> ServiceMetrics:
    return ServiceMetrics()


@pytest.fixture
def scraper(storage: Storage, metrics: ServiceMetrics) -> Iterator[Scraper]:
    """A scraper with a 1 MiB response cap, closed after the test (the scraper tests)."""
    s = Scraper(storage, metrics, max_bytes=1 << 20)
    yield s
    s.close()


@pytest.fixture
def server_factory(tmp_path: Path) -> Iterator:
    """Make (and always clean up) server processes: factory(db=None, env=None, args=())."""
    made: list[ServerProcess] = []

    def make(
        db: Path | None = None,
        env: dict[str, str] | None = None,
        args: tuple[str, ...] = (),
        start: bool = True,
    ) -> ServerProcess:
        child_env = {k: v for k, v in os.environ.items() if not k.startswith("INFERLEDGER_")}
        child_env.update(env or {})
        srv = ServerProcess(
            db=db or tmp_path / "serve.duckdb",
            port=free_port(),
            env=child_env,
            args=list(args),
            log_path=tmp_path / f"server-{len(made)}.log",
        )
        made.append(srv)
        return srv.start() if start else srv

    yield make
    for srv in made:
        if srv.proc is not None and srv.proc.poll() is None:
            srv.proc.kill()
            srv.proc.wait()


@pytest.fixture
def server(server_factory) -> ServerProcess:
    return server_factory()


@dataclass
class LiveService:
    """An in-process `Service` answering real HTTP on loopback; its storage is inspectable."""

    service: object
    thread: object
    url: str

    @property
    def storage(self) -> Storage:
        """The service's storage, after every accepted span has been written (ingest commits
        asynchronously from the spool, so a test reading right after a 200 waits for it)."""
        assert self.service.ingestor.flush(30), "ingest did not drain"  # type: ignore[attr-defined]
        return self.service.storage  # type: ignore[attr-defined]


@pytest.fixture
def live_factory(tmp_path: Path) -> Iterator:

    from inferledger.server import serve_in_thread
    from inferledger.settings import load_settings

    made: list[LiveService] = []

    def make(**overrides: object) -> LiveService:
        port = free_port()
        # Sign-in is off unless a test turns it on (auth__enabled=True; tests/test_auth.py).
        values = {
            "db": str(tmp_path / f"live-{len(made)}.duckdb"),
            "auth__enabled": False,
            **overrides,
        }
        settings = load_settings(env={}).replace(port=port, **values)
        svc, thread, url = serve_in_thread(settings)
        live = LiveService(svc, thread, url)
        made.append(live)
        return live

    yield make
    for live in made:
        live.service.request_stop()  # type: ignore[attr-defined]
        live.thread.join(30)  # type: ignore[attr-defined]


@pytest.fixture
def live(live_factory) -> LiveService:
    return live_factory()


@pytest.fixture(scope="session")
def browser():
    """Debian's headless Chromium driven by Playwright (no browser download)."""
    from playwright.sync_api import sync_playwright

    if not Path(CHROMIUM).exists():
        pytest.fail("Chromium is missing: scripts/setup --test installs it (apt-get chromium)")
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture
def page(browser):
    """A fresh page that records console errors; the test fails if any were logged."""
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    pg = context.new_page()
    errors: list[str] = []
    pg.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    yield pg
    context.close()
    assert errors == [], f"browser console errors: {errors}"


@pytest.fixture(scope="session")
def ledger_end() -> datetime:
    """The instant the demo ledger ends: the last Monday, Tuesday or Thursday 15:07:30 UTC
    before now (not Wednesday: the demo moves /summarize to the 8B every Wednesday at 14:00,
    a planted false economy the Unit economics test must not find in its one day). The
    demo's clock stands still there, so the ledger holds nothing after it however long the
    build takes, and a test that derives its range from this instant (not from the clock when
    it runs) selects the same rows whatever hour, day or month boundary passes during the
    session (issue #17). A fixed weekday afternoon, not "now": the demo's traffic follows the
    hour and the weekday, and a ledger of the quiet night or weekend hours lacked what the
    tests browse (an app with no requests, an hourly service charged to no team), so the UI
    tests passed or failed with the hour CI ran at. At most 4 days back: inside the
    pages' default 7 days."""
    now = datetime.now(UTC)
    end = now.replace(hour=15, minute=7, second=30, microsecond=0)
    while end >= now or end.weekday() not in (0, 1, 3):
        end -= timedelta(days=1)
    return end


def whole_days(end: datetime) -> tuple[datetime, datetime, str]:
    """A custom range of whole UTC days that holds the whole demo ledger ending at `end`:
    [start, end) as datetimes, and the query string that asks the UI for the same days."""
    last = end.replace(hour=0, minute=0, second=0, microsecond=0)
    start = last - timedelta(days=2)
    return (
        start,
        last + timedelta(days=1),
        f"?range=custom&start={start:%Y-%m-%d}&end={last:%Y-%m-%d}",
    )


def hours_up_to(end: datetime, hours: int) -> tuple[datetime, datetime, str]:
    """The `hours` whole UTC hours up to the end of `end`'s hour (what the "Last 24 hours"
    preset picks at `end`), and the custom range's query string that asks for them."""
    stop = end.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    start = stop - timedelta(hours=hours)
    query = urlencode({"range": "custom", "start": start.isoformat(), "end": stop.isoformat()})
    return start, stop, "?" + query


def build_demo_ledger(
    folder: Path, *, end: datetime, days: float, rate_scale: float, wait_s: float
) -> Path:
    """A real demo database (the shipped scenario, seed 3) built through the real ingest path
    up to `end`, with its cost ledger computed by a full refresh."""
    import io

    from inferledger.demo import Demo, DemoOptions
    from ledger.marts import Refresher

    db = folder / "demo.duckdb"
    demo = Demo(
        DemoOptions(db=db, port=free_port(), days=days, rate_scale=rate_scale, seed=3),
        out=io.StringIO(),
        err=io.StringIO(),
        clock=end.timestamp,
    )
    demo.start()
    try:
        assert demo.wait_history(wait_s), demo.failed
    finally:
        demo.stop()
    with Storage(db, read_timeout_s=120) as storage:
        Refresher(storage).refresh(full=True)
    return db


@pytest.fixture(scope="session")
def demo_ledger(tmp_path_factory, ledger_end: datetime) -> Path:
    """A real demo database (2.4 h of the demo's traffic at half rate, through the real ingest
    path, ending at `ledger_end`), with its cost ledger computed: what the UI tests browse.
    Built once per session; use `ledger_server` for a server on a private copy."""
    folder = tmp_path_factory.mktemp("demo-ledger")
    return build_demo_ledger(folder, end=ledger_end, days=0.1, rate_scale=0.5, wait_s=600)


#: Hours of the demo story ledger: a Wednesday afternoon at full rate, 12:00-16:00 UTC, the
#: busiest hours of the week, which hold the route switch at 14:00 and the 70B's KV-bound peak.
STORY_HOURS = 4


def last_wednesday_4pm() -> datetime:
    """The last Wednesday 16:00 UTC before now: the demo's clock stands still there."""
    now = datetime.now(UTC)
    end = now.replace(hour=16, minute=0, second=0, microsecond=0)
    while end >= now or end.weekday() != 2:
        end -= timedelta(days=1)
    return end


@pytest.fixture(scope="session")
def story(tmp_path_factory) -> tuple[Path, datetime]:
    """(the database, its end): the shipped scenario, seed 3, traffic x1, STORY_HOURS of
    history ending last Wednesday 16:00 UTC; built once per session for tests/test_demo_story.py
    and tests/test_demo_alerts.py."""
    end = last_wednesday_4pm()
    folder = tmp_path_factory.mktemp("demo-story")
    db = build_demo_ledger(folder, end=end, days=STORY_HOURS / 24, rate_scale=1.0, wait_s=900)
    return db, end


@pytest.fixture
def ledger_server(demo_ledger: Path, live_factory, tmp_path: Path) -> LiveService:
    """An in-process server on a private copy of the demo ledger database."""
    import shutil

    copy = tmp_path / "ledger.duckdb"
    shutil.copy(demo_ledger, copy)
    return live_factory(db=str(copy))


# ---------------------------------------------------------------- a webhook receiver on loopback
class Post(NamedTuple):
    headers: dict[str, str]
    body: bytes
    at: float  # time.monotonic() when it was answered


class WebhookReceiver:
    """A webhook endpoint on loopback that records every POST and answers from a script of
    statuses, then `default_status`. delay_s: wait before answering (a slow channel);
    hold_first: keep the first request open until `release` is set (its sender killed
    meanwhile), with `first` set when it arrives."""

    def __init__(
        self,
        statuses: list[int] | None = None,
        *,
        default_status: int = 200,
        delay_s: float = 0.0,
        hold_first: bool = False,
    ) -> None:
        self.posts: list[Post] = []
        self.first = threading.Event()
        self.release = threading.Event()
        script = list(statuses or [])
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if hold_first and not outer.first.is_set():
                    outer.first.set()
                    outer.release.wait(60)
                if delay_s:
                    time.sleep(delay_s)
                status = script.pop(0) if script else default_status
                outer.posts.append(Post(dict(self.headers), body, time.monotonic()))
                try:
                    self.send_response(status)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                except OSError:
                    pass  # the sender gave up (its timeout, or it was killed)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    @property
    def received(self) -> list[tuple[dict[str, str], Any]]:
        """(headers, JSON body) of each POST, in arrival order."""
        return [(p.headers, json.loads(p.body)) for p in self.posts]

    @property
    def keys(self) -> list[str]:
        """The Idempotency-Key header of each POST."""
        return [p.headers.get("Idempotency-Key", "") for p in self.posts]

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def webhook() -> Iterator[Any]:
    """Makes WebhookReceivers (same arguments), each closed after the test."""
    made: list[WebhookReceiver] = []

    def make(*args: Any, **kwargs: Any) -> WebhookReceiver:
        made.append(WebhookReceiver(*args, **kwargs))
        return made[-1]

    yield make
    for receiver in made:
        receiver.close()


# ---------------------------------------------------------------- the stand-in vLLM server
def exposition_samples(text: str) -> dict[tuple[str, tuple], float]:
    """A Prometheus text page as {(metric, sorted label pairs): value}, parsed by the scraper's
    own parser (ingest.prom_text)."""
    from ingest.prom_text import parse_exposition

    table = parse_exposition(text, "text/plain; version=0.0.4", datetime.now(UTC)).to_pylist()
    return {(row["metric"], tuple(sorted(row["labels"]))): row["value"] for row in table}


def sample_sum(samples: dict[tuple[str, tuple], float], metric: str, **labels: str) -> float:
    """The sum of `metric`'s samples whose labels include `labels`."""
    return sum(
        v
        for (m, lab), v in samples.items()
        if m == metric and all((k, val) in lab for k, val in labels.items())
    )


class RunningSim:
    """A SimServer serving on free loopback ports from a thread of the test process (from
    serving_sim): its addresses, a JSON poster and its finished records."""

    def __init__(self, server: Any, thread: threading.Thread) -> None:
        self.server = server
        self.thread = thread
        addrs = server.addresses
        self.host, self.port = addrs["router"]
        self.url = f"http://{self.host}:{self.port}"
        self.replica_urls = [
            "http://{}:{}".format(*addrs[f"replica{i}"])
            for i in range(server.options.cluster.num_replicas)
        ]
        self.dcgm_url = "http://{}:{}".format(*addrs["dcgm"]) if "dcgm" in addrs else None

    def post(self, path: str, body: object, url: str | None = None, **kw: Any) -> requests.Response:
        return requests.post((url or self.url) + path, json=body, timeout=30, **kw)

    def record(self, request_id: str) -> Any:
        for r in self.server.engine.records:
            if r.request_id == request_id:
                return r
        raise AssertionError(f"no record for {request_id}")


@contextlib.contextmanager
def serving_sim(options: Any) -> Iterator[tuple[Any, threading.Thread]]:
    """A SimServer (inferledger.sim_server) for `options` (SimServeOptions, port 0 for free
    ports) serving on a thread until the block ends; then it must stop within 30 s."""
    from inferledger.sim_server import SimServer

    server = SimServer(options).bind()
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"install_signal_handlers": False}, daemon=True
    )
    thread.start()
    try:
        assert server.ready.wait(10), "simulator did not start"
        yield server, thread
    finally:
        server.request_stop()
        thread.join(30)
    assert not thread.is_alive(), "simulator did not stop"


# ---------------------------------------------------------------- sign-in (browser tests)
PASSWORDS = {"ann": "ann-admin-password", "vic": "vic-viewer-pass"}


@pytest.fixture
def secured(live_factory) -> LiveService:
    live = live_factory(auth__enabled=True)
    users.add_user(live.service.storage, "ann", "admin", PASSWORDS["ann"], by="test")
    users.add_user(live.service.storage, "vic", "viewer", PASSWORDS["vic"], by="test")
    return live


class Console:
    """Console errors of a page; `expect` names the ones a test provokes on purpose."""

    def __init__(self) -> None:
        self.errors: list[str] = []
        self.expected: list[re.Pattern[str]] = []

    def expect(self, pattern: str) -> None:
        self.expected.append(re.compile(pattern))

    def unexpected(self) -> list[str]:
        return [e for e in self.errors if not any(p.search(e) for p in self.expected)]


@pytest.fixture
def tab(browser) -> Iterator[tuple[Any, Console]]:
    """Like conftest's `page` (1280x800, fails on console errors), but a test may declare an
    error it provokes: the browser logs a 403 answer as 'Failed to load resource'."""
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    console = Console()
    page.on("console", lambda m: console.errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda exc: console.errors.append(str(exc)))
    yield page, console
    context.close()
    assert console.unexpected() == [], f"browser console errors: {console.unexpected()}"


def sign_in(page: Any, url: str, name: str, password: str, path: str = "/") -> None:
    page.goto(url + path)
    page.wait_for_selector("#login-name")
    page.fill("#login-name", name)
    page.fill("#login-password", password)
    page.click("button[type=submit]")


def session_for(live: LiveService, name: str) -> requests.Session:
    """A signed-in HTTP session (no browser): the login form with its CSRF token."""
    session = requests.Session()
    login = session.get(live.url + "/login", timeout=10)
    csrf = login.text.split('name="csrf" value="')[1].split('"')[0]
    session.post(
        live.url + "/login",
        data={"name": name, "password": PASSWORDS[name], "csrf": csrf, "next": "/"},
        timeout=10,
    )
    return session


def choose(page: Any, dropdown: str, option: str) -> None:
    """Pick an option of a dcc.Dropdown whose label starts with `option`."""
    page.click(f"#{dropdown}")
    page.get_by_role("option", name=re.compile("^" + re.escape(option) + r"\b")).click()


def export_rows(text: str) -> list[dict[str, str]]:
    """The rows of a dashboard CSV download, after the "#" lines that say what it holds
    (app/exports.py); asserts they are there, so every download states its range."""
    lines = text.splitlines(keepends=True)
    comments = [line for line in lines if line.startswith("#")]
    assert comments and comments[0].startswith("# InferLedger export:"), lines[:3]
    assert any(line.startswith("# range: ") for line in comments)
    return list(csv.DictReader(line for line in lines if not line.startswith("#")))
