"""Driving the dashboard in a real headless Chromium: page-ready timing (bench/bench_pages.py)
and the screenshots in docs/screenshots (scripts/screenshots). Needs the `test` extra
(Playwright) and Debian's Chromium (/usr/bin/chromium); nothing here runs in `serve`.

A page is **ready** when every chart on it has been drawn and no loading indicator is left:
every `.js-plotly-plot` has its plot layer, no `[data-dash-is-loading]` element remains, and no
Dash callback is in flight or about to start (none for :data:`QUIET_S` after the last one ended).
Without that last rule a load could read as ready before the chart callbacks were even sent:
the empty graphs are drawn first, with no loading mark yet, and a page of 11 callbacks (~850 ms)
then timed at ~180 ms in some loads and not others.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from inferledger.core.errors import InferLedgerError

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
#: The pages, in navigation order: (name, path). The trace view is added with a real trace id.
PAGES = (
    ("overview", "/"),
    ("spend", "/spend"),
    ("economics", "/economics"),
    ("latency", "/latency"),
    ("gpu", "/gpu"),
    ("requests", "/requests"),
    ("budgets", "/budgets"),
    ("alerts", "/alerts"),
    ("capacity", "/capacity"),
)

_READY_JS = """
() => {
  if (document.querySelector('[data-dash-is-loading="true"]')) return false;
  const main = document.querySelector('#content');
  if (!main || !main.firstElementChild) return false;
  const plots = document.querySelectorAll('#content .js-plotly-plot');
  for (const p of plots) { if (!p.querySelector('.main-svg')) return false; }
  return true;
}
"""


@dataclass(frozen=True, slots=True)
class PageTiming:
    name: str
    ready_ms: float
    callbacks: int
    slowest_callback_ms: float


@contextmanager
def chromium(width: int = 1280, height: int = 800) -> Iterator[Any]:
    """A Playwright page in Debian's headless Chromium."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        raise InferLedgerError(
            "Playwright is missing: install the test extra (scripts/setup --test)"
        ) from None
    if not Path(CHROMIUM).exists():
        raise InferLedgerError(f"Chromium is missing at {CHROMIUM}: apt-get install chromium")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        context = browser.new_context(viewport={"width": width, "height": height})
        try:
            yield context.new_page()
        finally:
            context.close()
            browser.close()


def sign_in(page: Any, base_url: str, user: str, password: str) -> None:
    page.goto(base_url + "/login")
    page.fill("#login-name", user)
    page.fill("#login-password", password)
    page.click("button[type=submit]")
    page.wait_for_load_state("networkidle")


#: How long no Dash callback may be in flight before a drawn page counts as settled.
QUIET_S = 0.25


def time_page(page: Any, url: str, name: str, timeout_s: float = 30.0) -> PageTiming:
    """Navigate and wait until ready (see the module's docstring); the callbacks' times as the
    browser saw them (loopback: server time plus a fraction of a millisecond). The ready time
    is when the page was first seen drawn after its last callback, not when the quiet period
    that confirms it ended."""
    callbacks: list[float] = []
    in_flight: set[Any] = set()
    last_end = [time.perf_counter()]

    def is_callback(request: Any) -> bool:
        return "/_dash-update-component" in request.url

    def on_request(request: Any) -> None:
        if is_callback(request):
            in_flight.add(request)

    def on_done(request: Any) -> None:
        if request in in_flight:
            in_flight.discard(request)
            last_end[0] = time.perf_counter()

    def on_response(response: Any) -> None:
        if is_callback(response.request):
            timing = response.request.timing
            callbacks.append(timing["responseEnd"] - timing["requestStart"])

    handlers = {
        "request": on_request,
        "requestfinished": on_done,
        "requestfailed": on_done,
        "response": on_response,
    }
    for event, handler in handlers.items():
        page.on(event, handler)
    try:
        started = time.perf_counter()
        page.goto(url)
        deadline = started + timeout_s
        drawn_at: float | None = None  # first seen drawn with nothing in flight
        while True:
            remaining_ms = max(1.0, (deadline - time.perf_counter()) * 1000)
            page.wait_for_function(_READY_JS, timeout=remaining_ms, polling=20)
            now = time.perf_counter()
            if in_flight or (drawn_at is not None and drawn_at < last_end[0]):
                drawn_at = None  # a callback ran since: the page is drawn again after it
            if not in_flight and drawn_at is None:
                drawn_at = now
            if drawn_at is not None and now - max(last_end[0], drawn_at) >= QUIET_S:
                ready = (drawn_at - started) * 1000
                break
            if now > deadline:
                raise TimeoutError(f"{name}: callbacks still running after {timeout_s:g} s")
            page.wait_for_timeout(20)
    finally:
        for event, handler in handlers.items():
            page.remove_listener(event, handler)
    return PageTiming(name, ready, len(callbacks), max(callbacks, default=0.0))


def screenshot_pages(
    base_url: str,
    out: Path,
    query: str = "",
    trace_id: str | None = None,
    budget: str | None = None,
    **login: str,
) -> list[Path]:
    """A PNG of every page (1280 px wide, full height) into `out`; returns the files."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    pages = list(PAGES)
    if trace_id:
        pages.append(("trace", f"/trace/{trace_id}"))
    if budget:
        pages.append(("budget", f"/budgets?{urlencode({'budget': budget})}"))
    with chromium() as page:
        if login:
            sign_in(page, base_url, login["user"], login["password"])
        for name, path in pages:
            time_page(page, base_url + path + query, name)
            page.wait_for_timeout(300)  # let transitions finish
            target = out / f"{name}.png"
            page.screenshot(path=str(target), full_page=True)
            written.append(target)
        written.append(plan_capacity(page, base_url, out / "capacity-plan.png"))
    return written


def plan_capacity(page: Any, base_url: str, target: Path, timeout_s: float = 600.0) -> Path:
    """The Capacity planner with a plan run: load the ledger's last week as the profile, run
    the page's default candidates, and a PNG of the results (the user must be allowed to
    plan: an analyst, or sign-in off)."""
    page.goto(base_url + "/capacity")
    page.wait_for_selector("#capacity-load")
    page.click("#capacity-load")
    page.wait_for_selector("#capacity-message:has-text('Loaded')", timeout=timeout_s * 1000)
    page.click("#capacity-run")
    page.wait_for_selector("#capacity-status:has-text('Done')", timeout=timeout_s * 1000)
    page.wait_for_timeout(1000)  # the charts' first draw
    page.locator("#capacity-results").screenshot(path=str(target))
    return target
