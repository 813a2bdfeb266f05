"""Driving the dashboard in a real headless Chromium: page-ready timing (bench/bench_pages.py)
and the screenshots in docs/screenshots (scripts/screenshots). Needs the `test` extra
(Playwright) and Debian's Chromium (/usr/bin/chromium); nothing here runs in `serve`.

A page is **ready** when every chart on it has been drawn and no loading indicator is left:
every `.js-plotly-plot` has its plot layer, and no `[data-dash-is-loading]` element remains.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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


def time_page(page: Any, url: str, name: str, timeout_s: float = 30.0) -> PageTiming:
    """Navigate and wait until ready; the callbacks' times as the browser saw them (loopback:
    server time plus a fraction of a millisecond)."""
    callbacks: list[float] = []

    def on_response(response: Any) -> None:
        if "/_dash-update-component" in response.url:
            timing = response.request.timing
            callbacks.append(timing["responseEnd"] - timing["requestStart"])

    page.on("response", on_response)
    started = time.perf_counter()
    page.goto(url)
    page.wait_for_function(_READY_JS, timeout=timeout_s * 1000, polling=20)
    ready = (time.perf_counter() - started) * 1000
    page.remove_listener("response", on_response)
    return PageTiming(name, ready, len(callbacks), max(callbacks, default=0.0))


def screenshot_pages(
    base_url: str, out: Path, query: str = "", trace_id: str | None = None, **login: str
) -> list[Path]:
    """A PNG of every page (1280 px wide, full height) into `out`; returns the files."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    pages = list(PAGES)
    if trace_id:
        pages.append(("trace", f"/trace/{trace_id}"))
    with chromium() as page:
        if login:
            sign_in(page, base_url, login["user"], login["password"])
        for name, path in pages:
            time_page(page, base_url + path + query, name)
            page.wait_for_timeout(300)  # let transitions finish
            target = out / f"{name}.png"
            page.screenshot(path=str(target), full_page=True)
            written.append(target)
    return written
