"""The HTTP front of `inferledger serve` against slow and idle clients (issue #17): deadlines
for idle connections, request headers and whole requests, and a connection limit that idle
sockets cannot fill. Real sockets on loopback against a real Service."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from urllib.parse import urlsplit

import pytest
import requests

from inferledger.core.http_server import wait_until

PARTIAL_HEADER = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n"


def _address(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    return str(parts.hostname), int(parts.port or 80)


@contextmanager
def _sockets(url: str, count: int, first_bytes: bytes = b"") -> Iterator[list[socket.socket]]:
    """`count` connections that send `first_bytes` (maybe nothing) and then stay silent."""
    with ExitStack() as stack:
        made = []
        for _ in range(count):
            sock = stack.enter_context(socket.create_connection(_address(url), timeout=10))
            if first_bytes:
                sock.sendall(first_bytes)
            made.append(sock)
        yield made


def _read_until_closed(sock: socket.socket, timeout_s: float) -> bytes:
    """Everything the server sends until it closes the connection (fails on timeout)."""
    sock.settimeout(timeout_s)
    got = b""
    while chunk := sock.recv(4096):
        got += chunk
    return got


def _closed_count(url: str, reason: str) -> float:
    for line in requests.get(url + "/metrics", timeout=10).text.splitlines():
        if line.startswith(f'inferledger_http_connections_closed_total{{reason="{reason}"}}'):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_idle_connections_do_not_take_the_service_offline(live) -> None:
    """300 connections that never finish a request (half silent, half a partial header):
    /healthz, a page and ingest still answer. Before: waitress stopped accepting at its
    default limit of 100 connections and everything waited for minutes."""
    with _sockets(live.url, 150), _sockets(live.url, 150, PARTIAL_HEADER):
        started = time.monotonic()
        assert requests.get(live.url + "/healthz", timeout=10).text == "ok\n"
        assert requests.get(live.url + "/readyz", timeout=10).status_code == 200
        assert requests.get(live.url + "/", timeout=10).status_code == 200
        resp = requests.post(
            live.url + "/v1/traces",
            data=b"",
            headers={"Content-Type": "application/x-protobuf"},
            timeout=10,
        )
        assert resp.status_code == 200
        assert time.monotonic() - started < 30  # each answer bounded above; before: none came


def test_slow_clients_are_dropped_past_their_deadlines(live_factory) -> None:
    live = live_factory(http__header_timeout_s=0.5, http__request_timeout_s=1.5)
    url = live.url
    with _sockets(url, 1) as (silent,), _sockets(url, 1, PARTIAL_HEADER) as (partial,):
        body_header = (
            b"POST /v1/traces HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/x-protobuf\r\nContent-Length: 100\r\n\r\n0123456789"
        )
        with _sockets(url, 1, body_header) as (upload,):
            # nothing sent: closed without an answer (also how keep-alive connections end)
            assert _read_until_closed(silent, 10) == b""
            # a header not finished in time: 408, then closed
            assert _read_until_closed(partial, 10).startswith(b"HTTP/1.1 408 Request Timeout")
            # a body not finished within the request deadline: 408 too
            assert _read_until_closed(upload, 10).startswith(b"HTTP/1.1 408 ")
    # a header trickled byte by byte is held to the header deadline, not reset by each byte
    with _sockets(url, 1) as (trickle,):
        trickle.settimeout(0.05)
        started, got = time.monotonic(), b""
        for byte in (PARTIAL_HEADER * 100)[:2000]:
            try:
                trickle.send(bytes([byte]))
                got += trickle.recv(4096)
                break  # the server answered (or closed)
            except TimeoutError:
                continue
            except OSError:
                break
        assert got.startswith(b"HTTP/1.1 408 "), got
        assert time.monotonic() - started < 20  # the trickle would last 100 s unchecked
    for reason in ("idle", "header_timeout", "request_timeout"):
        assert _closed_count(url, reason) >= 1, reason
    # a client that sends its request in time is served as before, keep-alive included
    with requests.Session() as session:
        for _ in range(2):
            assert session.get(url + "/healthz", timeout=10).text == "ok\n"


def test_at_the_connection_limit_idle_connections_make_room(live_factory) -> None:
    """Even with the limit full of idle sockets and deadlines far away, a health check gets
    in: the connections waiting longest without a request are closed first."""
    live = live_factory(
        http__connection_limit=20, http__header_timeout_s=600, http__request_timeout_s=600
    )
    with _sockets(live.url, 30), _sockets(live.url, 5, PARTIAL_HEADER):
        assert requests.get(live.url + "/healthz", timeout=10).text == "ok\n"
    assert wait_until(lambda: _closed_count(live.url, "shed") >= 1, 10)


# ---------------------------------------------------------------- security headers

CRAFTED = "?range=custom&start=2026-01-01&end=9999-12-31"
DRAWN = """() => !document.querySelector('[data-dash-is-loading="true"]')
  && document.querySelectorAll('.js-plotly-plot .main-svg').length > 0"""


def test_security_headers_on_pages_assets_and_api(live) -> None:
    url = live.url
    page = requests.get(url + "/spend" + CRAFTED, timeout=10)
    csp = page.headers["Content-Security-Policy"]
    assert "script-src 'self' 'sha256-" in csp and "'unsafe-eval'" not in csp
    assert "frame-ancestors 'none'" in csp and "object-src 'none'" in csp
    for path in ("/", "/spend", "/login", "/_dash-layout", "/_dash-dependencies", "/healthz"):
        resp = requests.get(url + path, timeout=10)
        assert resp.headers["X-Frame-Options"] == "DENY", path
        assert resp.headers["X-Content-Type-Options"] == "nosniff", path
        assert resp.headers["Referrer-Policy"] == "same-origin", path
        assert "frame-ancestors 'none'" in resp.headers["Content-Security-Policy"], path
    for resp in (
        requests.get(url + "/assets/inferledger.css", timeout=10),
        requests.get(url + "/metrics", timeout=10),
        requests.post(url + "/v1/traces", data=b"x", timeout=10),  # a 400 from the receiver
    ):
        assert resp.headers["X-Content-Type-Options"] == "nosniff"
        assert resp.headers["Content-Security-Policy"].startswith("default-src 'none'")


@pytest.mark.browser
def test_pages_work_under_the_content_security_policy(live, page) -> None:
    """Every chart page renders under the policy with the crafted range: the `page` fixture
    fails on any console error, which is how a blocked script or style shows."""
    for path in ("/", "/spend", "/latency", "/gpu", "/economics"):
        resp = page.goto(live.url + path + CRAFTED)
        assert "script-src" in resp.headers["content-security-policy"]
        page.wait_for_function(DRAWN, timeout=20_000)
        notice = page.locator("#filter-problems").inner_text()
        assert "end moved back to" in notice, path
