"""The scraper against hostile or broken targets on 127.0.0.1 (issue #17, items 6 and 7).

- A target that drips its answer one byte at a time never trips requests' per-read timeout;
  the scrape must still end at its target's timeout, as a failed scrape, and closing the
  scraper must end a scrape in flight at once so that shutdown never waits for a target.
- Sample timestamps Prometheus would refuse (out of bounds, or not even a number) and NaN or
  negative counters are dropped one by one and counted; the rest of the scrape is stored.
"""

from __future__ import annotations

import contextlib
import math
import socket
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta

import pytest
from apscheduler.schedulers.background import BackgroundScheduler

from inferledger.core.service_metrics import ServiceMetrics
from inferledger.core.settings import ScrapeTarget
from inferledger.server import Service
from inferledger.settings import load_settings
from ingest.prom_text import (
    MAX_SAMPLE_AGE,
    MAX_SAMPLE_LEAD,
    DropReason,
    ExpositionError,
    read_exposition,
)

T0 = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
DRIP_S = 0.2  # one byte every DRIP_S: each read waits less than the timeout below
TIMEOUT_S = 0.5
SLACK_S = 3.0  # a loaded CI machine may start the deadline's timer late; the drip lasts 15+ s
HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nConnection: close\r\n\r\n"
BODY = b"# TYPE drip gauge\ndrip 1\n"


def read_request(conn: socket.socket) -> bool:
    """Read one request's head; False when the client hung up first."""
    request = b""
    while b"\r\n\r\n" not in request:
        chunk = conn.recv(4096)
        if not chunk:
            return False
        request += chunk
    return True


class RawServer:
    """A raw TCP server on 127.0.0.1 that hands each connection to ``answer`` on a thread of
    its own; ``close()`` stops it and every answer still running."""

    def __init__(self, answer: Callable[[socket.socket], None]) -> None:
        self.answer = answer
        self.stop = threading.Event()
        self.connected = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.05)
        self.port = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, name="raw-accept", daemon=True).start()

    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/metrics"

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:  # closed
                return
            self.connected.set()
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):  # OSError: the scraper hung up
            conn.settimeout(5)
            if read_request(conn):
                self.answer(conn)

    def close(self) -> None:
        self.stop.set()
        self._listener.close()


@contextlib.contextmanager
def drip_server(head: bytes, drip: bytes) -> Iterator[RawServer]:
    """Answers with ``head`` at once, then ``drip`` one byte every DRIP_S. It stops by itself
    at the end of ``drip`` (so a scraper without a deadline does finish, late) or at close."""

    def answer(conn: socket.socket) -> None:
        conn.sendall(head)
        for i in range(len(drip)):
            if server.stop.wait(DRIP_S):
                return
            conn.sendall(drip[i : i + 1])

    server = RawServer(answer)
    try:
        yield server
    finally:
        server.close()


class TextServer:
    """Answers every GET with the current ``text`` at once."""

    def __init__(self, content_type: str = "text/plain; version=0.0.4") -> None:
        self.text = ""
        self.content_type = content_type
        self._server = RawServer(self._answer)

    def url(self) -> str:
        return self._server.url()

    def _answer(self, conn: socket.socket) -> None:
        body = self.text.encode()
        head = (
            "HTTP/1.1 200 OK\r\nConnection: close\r\n"
            f"Content-Type: {self.content_type}\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        conn.sendall(head.encode() + body)

    def close(self) -> None:
        self._server.close()


def target(name: str, url: str, *, interval_s: float = 15, timeout_s: float = TIMEOUT_S):
    return ScrapeTarget(name, url, interval_s, timeout_s, "prometheus", "chat-prod")


def metric_value(metrics: ServiceMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


# ---------------------------------------------------------------- item 6: slow drip
@pytest.mark.parametrize(
    ("head", "drip"),
    [
        (b"", HEAD + BODY),  # the status line and headers, one byte at a time
        (HEAD, BODY * 3),  # headers at once, then a body without Content-Length
        (HEAD.replace(b"\r\n\r\n", b"\r\nContent-Length: 75\r\n\r\n"), BODY * 3),
    ],
    ids=["headers", "body-without-length", "body-with-length"],
)
def test_a_slow_drip_ends_at_the_timeout(storage, scraper, metrics, head, drip):
    with drip_server(head, drip) as server:
        started = time.monotonic()
        result = scraper.scrape_once(target("drip", server.url()), now=T0)
        elapsed = time.monotonic() - started
    # the whole exchange took the timeout, not the 5+ s the drip lasts
    assert elapsed < TIMEOUT_S + SLACK_S, elapsed
    assert len(drip) * DRIP_S > TIMEOUT_S + SLACK_S + 2
    assert (result.up, result.samples, result.error) == (False, 0, "timed out after 0.5 s")
    assert storage.fetchall("select up, error from scrapes") == [(False, "timed out after 0.5 s")]
    assert storage.scalar("select count(*) from metric_samples") == 0
    assert metric_value(metrics, "inferledger_scrape_target_up", target="drip") == 0


def test_closing_the_scraper_ends_a_scrape_in_flight(storage, scraper):
    # timeout_s 30: only close() can end this scrape before the drip does
    with drip_server(b"", HEAD + BODY) as server:
        slow = target("drip", server.url(), interval_s=30, timeout_s=30)
        scheduler = BackgroundScheduler(timezone=UTC)
        scraper.schedule(scheduler, [slow])
        scheduler.start()
        try:
            assert server.connected.wait(20)
        finally:
            started = time.monotonic()
            # the order Service.stop uses: close the scraper, then wait for the jobs
            scraper.close()
            scheduler.shutdown(wait=True)
            stopped_in = time.monotonic() - started
    assert stopped_in < 8, stopped_in  # 21 s before: until the drip ended
    # cut short by our own shutdown: no row saying the target was down
    assert storage.scalar("select count(*) from scrapes") == 0
    # and a scrape started after close() does nothing at all
    late = scraper.scrape_once(slow, now=T0)
    assert (late.up, late.error) == (False, "scraper closed")
    assert storage.scalar("select count(*) from scrapes") == 0


def test_service_stop_does_not_wait_for_a_slow_target(tmp_path):
    with drip_server(b"", HEAD + BODY * 10) as server:
        slow = target("drip", server.url(), interval_s=30, timeout_s=30)
        settings = load_settings(env={}).replace(
            db=str(tmp_path / "svc.duckdb"),
            scrape__targets=[slow],
            ledger__refresh_interval_s=0,
        )
        service = Service(settings).start()
        try:
            assert server.connected.wait(20)
        finally:
            started = time.monotonic()
            service.stop()
            stopped_in = time.monotonic() - started
    # before issue #17: until the drip ended, over a minute later
    assert stopped_in < 8, stopped_in


# ---------------------------------------------------------------- item 7: bad samples
@pytest.fixture
def text_server() -> Iterator[TextServer]:
    server = TextServer()
    yield server
    server.close()


def ms(moment: datetime) -> int:
    return round(moment.timestamp() * 1000)


def test_out_of_range_timestamps_are_dropped_not_fatal(storage, scraper, metrics, text_server):
    ts = [T0, T0 + timedelta(seconds=15)]
    far_future = ms(ts[1]) + 11 * 60 * 1000
    for at in ts:
        text_server.text = (
            "# TYPE good gauge\ngood 1\n"
            # int64-overflowing milliseconds: OverflowError at every scrape before issue #17
            f"huge 1 99999999999999999999999\n"
            f"future 1 {far_future}\n"
            "minus -1 -99999999999999\n"
            f"recent 2 {ms(at) - 1000}\n"
        )
        result = scraper.scrape_once(target("ts", text_server.url()), now=at)
        assert (result.up, result.samples, result.dropped) == (True, 2, 3)
    assert storage.fetchall(
        "select metric, count(*) from metric_samples group by 1 order by 1"
    ) == [("good", 2), ("recent", 2)]
    assert storage.fetchall("select up, samples from scrapes") == [(True, 2)] * 2
    assert metric_value(metrics, "inferledger_scrape_target_up", target="ts") == 1
    assert (
        metric_value(
            metrics,
            "inferledger_scrape_samples_dropped_total",
            target="ts",
            reason="timestamp_out_of_bounds",
        )
        == 6
    )


def test_nan_and_negative_counters_are_dropped(storage, scraper, metrics, text_server, caplog):
    def page(good: float, bad: str, bucket: str) -> str:
        return (
            "# TYPE requests_total counter\n"
            f'requests_total{{code="200"}} {good}\n'
            f'requests_total{{code="500"}} {bad}\n'
            "# TYPE latency_seconds histogram\n"
            f'latency_seconds_bucket{{le="0.5"}} {bucket}\n'
            f'latency_seconds_bucket{{le="+Inf"}} {good}\n'
            f"latency_seconds_count {good}\n"
            f"latency_seconds_sum {good / 10}\n"
            "# TYPE temperature gauge\ntemperature NaN\n"  # a NaN gauge is a value: kept
        )

    pages = [page(10, "5", "4"), page(20, "NaN", "-3"), page(30, "-7", "+Inf"), page(40, "9", "8")]
    for i, text in enumerate(pages):
        text_server.text = text
        result = scraper.scrape_once(
            target("c", text_server.url()), now=T0 + timedelta(seconds=15 * i)
        )
        assert (result.up, result.error, result.dropped) == (True, None, [0, 2, 2, 0][i])

    increases = storage.fetchall(
        "select metric, series_key, le, interval_end, increase from metric_counter_increases "
        "order by metric, series_key, le, interval_end"
    )
    assert increases
    assert all(row[-1] is not None and math.isfinite(row[-1]) and row[-1] >= 0 for row in increases)
    # the 500 series: 5, (NaN), (-7), 9 → one pair spanning the dropped samples
    assert [row[-1] for row in increases if row[1] == 'code="500"'] == [4]
    assert storage.scalar("select count(*) from metric_samples where metric = 'temperature'") == 4
    dropped = {
        reason: metric_value(
            metrics, "inferledger_scrape_samples_dropped_total", target="c", reason=reason
        )
        for reason in DropReason
    }
    assert dropped == {
        DropReason.TIMESTAMP_OUT_OF_BOUNDS: None,
        DropReason.COUNTER_NOT_FINITE: 2,  # NaN counter, +Inf bucket value
        DropReason.COUNTER_NEGATIVE: 2,  # -7 counter, -3 bucket
    }
    assert metric_value(metrics, "inferledger_scrape_target_up", target="c") == 1
    # one warning when the target started sending them, not one per scrape
    warnings = [r.getMessage() for r in caplog.records if "dropped" in r.getMessage()]
    assert warnings == [
        "scrape of c dropped 2 samples: 1 counter_negative (e.g. latency_seconds_bucket"
        '{le="0.5"} -3); 1 counter_not_finite (e.g. requests_total{code="500"} nan)'
    ]


def test_openmetrics_forbids_nan_counters_and_says_so(storage, scraper, metrics):
    server = TextServer("application/openmetrics-text; version=1.0.0")
    try:
        server.text = "# TYPE x counter\nx_total NaN\n# EOF\n"
        result = scraper.scrape_once(target("om", server.url()), now=T0)
    finally:
        server.close()
    assert not result.up
    assert result.error == "not valid OpenMetrics: Counter-like samples cannot be NaN: x_total NaN"
    assert metric_value(metrics, "inferledger_scrape_target_up", target="om") == 0


def test_sample_timestamp_bounds_are_prometheus_s():
    def kept(offset: timedelta) -> bool:
        text = f"x 1 {ms(T0 + offset)}\n"
        parsed = read_exposition(text, "text/plain", T0)
        return parsed.samples.num_rows == 1

    assert (timedelta(minutes=10), timedelta(hours=1)) == (MAX_SAMPLE_LEAD, MAX_SAMPLE_AGE)
    assert kept(MAX_SAMPLE_LEAD) and not kept(MAX_SAMPLE_LEAD + timedelta(milliseconds=1))
    assert kept(-MAX_SAMPLE_AGE) and not kept(-MAX_SAMPLE_AGE - timedelta(milliseconds=1))
    # not a number at all (the classic parser reads these as floats)
    for stamp in ("1e400", "-1e400", "NaN"):
        parsed = read_exposition(f"x 1 {stamp}\ny 2\n", "text/plain", T0)
        assert parsed.samples.column("metric").to_pylist() == ["y"]
        assert parsed.dropped == {DropReason.TIMESTAMP_OUT_OF_BOUNDS: 1}
    # a bad bucket bound still refuses the whole text, as before
    with pytest.raises(ExpositionError):
        read_exposition('# TYPE h histogram\nh_bucket{le="x"} 1\n', "text/plain", T0)
