"""The scraper against real HTTP servers on 127.0.0.1, storing into a real DuckDB file.

The vLLM stand-in serves a prometheus_client registry through prometheus_client's own
MetricsHandler (content negotiation and gzip as vLLM's /metrics does) with vLLM's metric names,
labels and default buckets; the dcgm-exporter stand-in serves its text format.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gzip
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from http.server import ThreadingHTTPServer

import pytest
from apscheduler.schedulers.background import BackgroundScheduler
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import MetricsHandler, choose_encoder

from inferledger.core.errors import InferLedgerError
from inferledger.core.service_metrics import ServiceMetrics
from inferledger.core.settings import ScrapeTarget
from inferledger.core.storage import Storage
from ingest.prom_text import ExpositionError, PageTemplate, parse_exposition
from ingest.scraper import ACCEPT_HEADER, SCRAPE_EXECUTOR, Scraper, scrape_job_id

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
T0 = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5)
TTFT_BUCKETS += (7.5, 10, 20, 40, 80, 160, 640, 2560)
FINISH_REASONS = ("stop", "length", "abort", "error", "repetition")


class FakeVllm:
    """The metrics of one vLLM engine; ``restart()`` starts every counter from zero again."""

    def __init__(self) -> None:
        self.restart()

    def restart(self) -> None:
        self.registry = r = CollectorRegistry()
        labels = ["model_name", "engine"]
        self.prompt_tokens = Counter("vllm:prompt_tokens", "Prompt tokens.", labels, registry=r)
        self.success = Counter(
            "vllm:request_success", "Finished requests.", [*labels, "finished_reason"], registry=r
        )
        self.running = Gauge("vllm:num_requests_running", "Running.", labels, registry=r)
        self.kv_usage = Gauge("vllm:kv_cache_usage_perc", "KV usage.", labels, registry=r)
        self.ttft = Histogram(
            "vllm:time_to_first_token_seconds", "TTFT.", labels, buckets=TTFT_BUCKETS, registry=r
        )
        info = Gauge(
            "vllm:cache_config_info",
            "Cache config.",
            ["block_size", "cache_dtype", "enable_prefix_caching", "num_gpu_blocks", "engine"],
            registry=r,
        )
        info.labels("16", "auto", "True", "27000", "0").set(1)
        for reason in FINISH_REASONS:  # vLLM creates every finished_reason child up front
            self.success.labels(MODEL, "0", reason)
        self.running.labels(MODEL, "0").set(0)
        self.kv_usage.labels(MODEL, "0").set(0)
        self.ttft.labels(MODEL, "0")
        self.prompt_tokens.labels(MODEL, "0")

    def serve(self, prompt_tokens: int, finished: dict[str, int], ttfts: list[float]) -> None:
        self.prompt_tokens.labels(MODEL, "0").inc(prompt_tokens)
        for reason, n in finished.items():
            self.success.labels(MODEL, "0", reason).inc(n)
        for ttft in ttfts:
            self.ttft.labels(MODEL, "0").observe(ttft)
        self.running.labels(MODEL, "0").set(len(ttfts))
        self.kv_usage.labels(MODEL, "0").set(0.1 * len(ttfts))

    def sample_count(self) -> int:
        """Samples a scrape should store: every sample except the `_created` ones."""
        encoder, _ = choose_encoder(ACCEPT_HEADER)
        body = encoder(self.registry).decode()
        return sum(
            1
            for line in body.splitlines()
            if line and not line.startswith("#") and "_created" not in line
        )


GPUS = (
    {"gpu": "0", "UUID": "GPU-3f1c", "pci_bus_id": "00000000:18:00.0", "device": "nvidia0"},
    {"gpu": "1", "UUID": "GPU-9a0e", "pci_bus_id": "00000000:2A:00.0", "device": "nvidia1"},
)
NODE = {"modelName": "NVIDIA H200", "Hostname": "gpu-node-1", "DCGM_FI_DRIVER_VERSION": "570.86"}


def dcgm_text(util: float, energy_mj: int) -> str:
    """dcgm-exporter's classic text: one series per GPU, its labels in exporter order."""
    families = [
        ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", (util, util)),
        ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).", (120000, 118000)),
        ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", (512.5, 498.25)),
        (
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
            "counter",
            "Total energy consumption since boot (in mJ).",
            (energy_mj, energy_mj),
        ),
    ]
    lines = []
    for name, kind, help_text, values in families:
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
        for gpu, value in zip(GPUS, values, strict=True):
            labels = ",".join(f'{k}="{v}"' for k, v in {**gpu, **NODE}.items())
            lines.append(f"{name}{{{labels}}} {value}")
    return "\n".join(lines) + "\n"


class Endpoint:
    """What one path answers; tests change it between scrapes."""

    def __init__(self, body: Callable[[], bytes] | None = None, content_type: str = "") -> None:
        self.body = body
        self.content_type = content_type
        self.status = 200
        self.delay_s = 0.0
        self.gzip = False
        self.requests = 0


class MetricsServer:
    """A ThreadingHTTPServer on 127.0.0.1 (port 0) that can be stopped and started again on the
    same port. /vllm goes through prometheus_client's MetricsHandler; other paths through
    Endpoint."""

    def __init__(self) -> None:
        self.vllm = FakeVllm()
        self.endpoints: dict[str, Endpoint] = {"/vllm": Endpoint()}
        self.release = threading.Event()  # ends every sleeping handler at teardown
        self.lock = threading.Lock()
        self.port = 0
        self._server: ThreadingHTTPServer | None = None
        self.start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def start(self) -> None:
        outer = self

        class Handler(MetricsHandler):
            def do_GET(self) -> None:
                endpoint = outer.endpoints[self.path]
                with outer.lock:  # handlers run on threads of their own
                    endpoint.requests += 1
                outer.last_headers = dict(self.headers)
                if endpoint.delay_s:
                    outer.release.wait(endpoint.delay_s)
                if endpoint.status != 200:
                    self.send_error(endpoint.status)
                elif endpoint.body is None:  # the vLLM stand-in
                    self.registry = outer.vllm.registry
                    super().do_GET()
                else:
                    payload = endpoint.body()
                    if endpoint.gzip:
                        payload = gzip.compress(payload)
                    self.send_response(200)
                    self.send_header("Content-Type", endpoint.content_type)
                    if endpoint.gzip:
                        self.send_header("Content-Encoding", "gzip")
                    self.end_headers()
                    # the scraper may have given up (a timeout test): nobody left to answer
                    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                        self.wfile.write(payload)

        server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        server.daemon_threads = True
        self.port = server.server_address[1]
        self._server = server
        threading.Thread(
            target=server.serve_forever, args=(0.05,), name="metrics-server", daemon=True
        ).start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def close(self) -> None:
        self.release.set()
        self.stop()


@pytest.fixture
def server() -> Iterator[MetricsServer]:
    srv = MetricsServer()
    yield srv
    srv.close()


def target(
    name: str, url: str, *, interval_s: float = 15, timeout_s: float = 2, kind: str = "vllm"
):
    return ScrapeTarget(name, url, interval_s, timeout_s, kind, "chat-prod")


def metric_value(metrics: ServiceMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def wait_for(predicate: Callable[[], bool], timeout_s: float = 30.0) -> None:
    """Poll ``predicate`` until it holds; the deadline is generous, the poll is fast."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.01)


# ---------------------------------------------------------------- vLLM, end to end
def test_vllm_scrapes_through_restart_and_outage(server, storage, scraper, metrics):
    vllm = target("vllm-a", server.url("/vllm"))
    ts = [T0 + timedelta(seconds=15 * i) for i in range(7)]

    server.vllm.serve(1000, {"stop": 3, "length": 1}, [0.03, 0.05, 0.3, 0.7])
    first = scraper.scrape_once(vllm, now=ts[0])
    assert first.up and first.http_status == 200 and first.error is None
    assert (
        first.samples
        == server.vllm.sample_count()
        == storage.scalar("select count(*) from metric_samples where ts = ?", [ts[0]])
    )
    # negotiated OpenMetrics, gzip on the wire, metric names kept with their colon
    assert server.last_headers["Accept"] == ACCEPT_HEADER
    assert "gzip" in server.last_headers["Accept-Encoding"]
    assert (
        storage.scalar(
            "select count(*) from metric_samples where metric like 'vllm\\_%' escape '\\'"
        )
        == 0
    )

    server.vllm.serve(500, {"stop": 2, "abort": 1}, [0.02, 0.09])
    assert scraper.scrape_once(vllm, now=ts[1]).up
    server.vllm.restart()  # vLLM restarted: counters start again from zero
    server.vllm.serve(200, {"stop": 1}, [0.2])
    assert scraper.scrape_once(vllm, now=ts[2]).up

    server.endpoints["/vllm"].status = 500
    failed = scraper.scrape_once(vllm, now=ts[3])
    assert (failed.up, failed.http_status, failed.samples) == (False, 500, 0)
    assert failed.error.startswith("HTTP 500")
    server.stop()
    refused = scraper.scrape_once(vllm, now=ts[4])
    assert not refused.up and refused.http_status is None
    assert refused.error.startswith("connection failed:")
    assert metric_value(metrics, "inferledger_scrape_target_up", target="vllm-a") == 0

    server.endpoints["/vllm"].status = 200
    server.start()
    server.vllm.serve(300, {"stop": 4}, [])
    assert scraper.scrape_once(vllm, now=ts[5]).up

    assert storage.fetchall("select ts, up, samples > 0, http_status from scrapes order by ts") == [
        (ts[0], True, True, 200),
        (ts[1], True, True, 200),
        (ts[2], True, True, 200),
        (ts[3], False, False, 500),
        (ts[4], False, False, None),
        (ts[5], True, True, 200),
    ]
    assert storage.scalar("select count(*) from metric_samples where ts in (?, ?)", ts[3:5]) == 0

    # prompt tokens: 1000 → 1500 → (restart) 200 → (down, down) → 500: increases 500, 200, 300
    rows = storage.fetchall(
        "select interval_end, increase, reset from metric_counter_increases "
        "where metric = 'vllm:prompt_tokens_total' order by interval_end"
    )
    assert rows == [(ts[1], 500, False), (ts[2], 200, True), (ts[5], 300, False)]
    assert storage.scalar("select min(increase) from metric_counter_increases") >= 0
    finished = dict(
        storage.fetchall(
            "select labels['finished_reason'], sum(increase) from metric_counter_increases "
            "where metric = 'vllm:request_success_total' group by 1"
        )
    )
    # stop: 3 → 5 → (restart) 1 → 5: 2 + 1 + 4; abort: 0 → 1 → 0 → 0: 1
    assert finished == {"stop": 7, "length": 0, "abort": 1, "error": 0, "repetition": 0}

    # TTFT in interval 1: 0.02 and 0.09, p50 rank 1 → top of (0.01, 0.02] = 0.02
    p50 = storage.scalar(
        "select p50 from metric_histogram_quantiles "
        "where family = 'vllm:time_to_first_token_seconds' and interval_end = ?",
        [ts[1]],
    )
    assert p50 == pytest.approx(0.02)

    info = storage.fetchall(
        "select labels, value from metric_samples "
        "where metric = 'vllm:cache_config_info' and ts = ?",
        [ts[0]],
    )
    assert info == [
        (
            {
                "block_size": "16",
                "cache_dtype": "auto",
                "enable_prefix_caching": "True",
                "engine": "0",
                "num_gpu_blocks": "27000",
            },
            1.0,
        )
    ]
    assert storage.fetchall(
        "select distinct type from metric_samples where family = 'vllm:time_to_first_token_seconds'"
    ) == [("histogram",)]
    assert (
        storage.scalar(
            "select count(*) from metric_samples where metric like '%\\_created' escape '\\'"
        )
        == 0
    )

    assert metric_value(metrics, "inferledger_scrapes_total", target="vllm-a", result="ok") == 4
    assert metric_value(metrics, "inferledger_scrapes_total", target="vllm-a", result="error") == 2
    assert metric_value(metrics, "inferledger_scrape_target_up", target="vllm-a") == 1
    assert (
        metric_value(metrics, "inferledger_scrape_samples", target="vllm-a")
        == server.vllm.sample_count()
    )
    assert metric_value(metrics, "inferledger_scrape_duration_seconds_count", target="vllm-a") == 6


# ---------------------------------------------------------------- dcgm-exporter
def test_dcgm_exporter_text(server, storage, scraper):
    state = {"util": 10, "energy_mj": 1_000_000}
    server.endpoints["/dcgm"] = Endpoint(
        lambda: dcgm_text(**state).encode(), "text/plain; version=0.0.4; charset=utf-8"
    )
    dcgm = target("dcgm-a", server.url("/dcgm"), kind="dcgm")
    assert scraper.scrape_once(dcgm, now=T0).samples == 8
    state.update(util=85, energy_mj=1_015_000)
    assert scraper.scrape_once(dcgm, now=T0 + timedelta(seconds=15)).up

    util = storage.fetchall(
        "select labels['gpu'], labels['UUID'], labels['modelName'], labels['Hostname'], value "
        "from stg_metric_samples where metric = 'DCGM_FI_DEV_GPU_UTIL' and ts = ? order by 1",
        [T0 + timedelta(seconds=15)],
    )
    assert util == [
        ("0", "GPU-3f1c", "NVIDIA H200", "gpu-node-1", 85.0),
        ("1", "GPU-9a0e", "NVIDIA H200", "gpu-node-1", 85.0),
    ]
    # a counter declared without _total keeps its exported name; 15 J over 15 s = 1000 mJ/s
    energy = storage.fetchall(
        "select metric, family, type, increase, rate_per_s from metric_counter_increases"
    )
    assert energy == [("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",) * 2 + ("counter", 15_000, 1000)] * 2
    assert storage.fetchall("select kind, deployment from scrapes group by all") == [
        ("dcgm", "chat-prod")
    ]


# ---------------------------------------------------------------- failures write nothing else
@pytest.mark.parametrize(
    ("body", "content_type", "expected"),
    [
        (b"<html><body>Login required</body></html>", "text/html", "not valid Prometheus text"),
        (b'DCGM_FI_DEV_GPU_UTIL{gpu="0" 12\n', "text/plain", "not valid Prometheus text"),
        (b"# TYPE x gauge\nx 1\n", "application/openmetrics-text; version=1.0.0", "Missing # EOF"),
        (b"\xff\xfe\x00garbage", "text/plain; charset=utf-8", "not valid utf-8 text"),
    ],
    ids=["html", "broken-labels", "truncated-openmetrics", "not-utf8"],
)
def test_garbage_is_a_failed_scrape(server, storage, scraper, body, content_type, expected):
    server.endpoints["/bad"] = Endpoint(lambda: body, content_type)
    result = scraper.scrape_once(target("bad", server.url("/bad")), now=T0)
    assert not result.up
    assert expected in result.error
    assert storage.fetchall("select up, samples, http_status, error from scrapes") == [
        (False, 0, 200, result.error)
    ]
    assert storage.scalar("select count(*) from metric_samples") == 0


def test_oversize_responses_are_failed_scrapes(server, storage, metrics):
    scraper = Scraper(storage, metrics, max_bytes=4096)
    big = (
        "# TYPE filler gauge\n" + "".join(f'filler{{i="{i}"}} {i}\n' for i in range(400))
    ).encode()
    server.endpoints["/big"] = Endpoint(lambda: big, "text/plain")
    server.endpoints["/bomb"] = Endpoint(lambda: big, "text/plain")
    server.endpoints["/bomb"].gzip = True  # small on the wire, too big once inflated
    assert len(gzip.compress(big)) < 4096 < len(big)
    for i, path in enumerate(["/big", "/bomb"]):
        result = scraper.scrape_once(
            target(path[1:], server.url(path)), now=T0 + timedelta(seconds=i)
        )
        assert not result.up
        assert result.error == "response larger than scrape.max_bytes (4096 bytes)"
    assert storage.scalar("select count(*) from scrapes where not up") == 2
    assert storage.scalar("select count(*) from metric_samples") == 0
    scraper.close()


def test_timeout_is_a_failed_scrape(server, storage, scraper):
    server.endpoints["/slow"] = Endpoint(lambda: b"x 1\n", "text/plain")
    server.endpoints["/slow"].delay_s = 5
    started = time.monotonic()
    result = scraper.scrape_once(target("slow", server.url("/slow"), timeout_s=0.3), now=T0)
    assert time.monotonic() - started < 4  # the target answers after 5 s
    assert not result.up
    assert result.error == "timed out after 0.3 s"
    assert storage.scalar("select count(*) from metric_samples") == 0


# ---------------------------------------------------------------- scheduling
def test_a_slow_target_does_not_delay_a_fast_one(server, storage, scraper):
    server.endpoints["/fast"] = Endpoint(lambda: b"# TYPE up_fast gauge\nup_fast 1\n", "text/plain")
    server.endpoints["/slow"] = Endpoint(lambda: b"up_slow 1\n", "text/plain")
    server.endpoints["/slow"].delay_s = 60  # holds its request until the server closes
    fast = target("fast", server.url("/fast"), interval_s=0.25, timeout_s=0.2)
    slows = [
        target(f"slow-{i}", server.url("/slow"), interval_s=60, timeout_s=60) for i in range(3)
    ]
    scheduler = BackgroundScheduler(timezone=UTC)
    jobs = scraper.schedule(scheduler, [*slows, fast])
    assert sorted(job.id for job in jobs) == [
        "scrape:fast",
        "scrape:slow-0",
        "scrape:slow-1",
        "scrape:slow-2",
    ]
    assert all(job.max_instances == 1 and job.coalesce and job.misfire_grace_time for job in jobs)

    def fast_scrapes() -> int:
        return storage.scalar("select count(*) from scrapes where target = 'fast' and up")

    scheduler.start()
    try:
        # Waits on the conditions it asserts, not on a window of wall-clock time (issue #17):
        # all three slow targets hold a thread for a minute, and meanwhile the fast one goes on
        # scraping. A fast scrape queued behind a slow one would wait that minute.
        wait_for(lambda: server.endpoints["/slow"].requests == 3)
        already = fast_scrapes()
        wait_for(lambda: fast_scrapes() >= already + 6)
        assert server.endpoints["/slow"].requests == 3
        assert storage.scalar("select count(*) from scrapes where target like 'slow-%'") == 0
    finally:
        # Service.stop's order: closing the scraper ends the slow scrapes in flight, so the
        # scheduler's shutdown does not wait a minute for them.
        started = time.monotonic()
        scraper.close()
        scheduler.shutdown(wait=True)
    assert time.monotonic() - started < 5
    assert storage.scalar("select count(*) from scrapes where target like 'slow-%'") == 0


def test_schedule_replaces_jobs_and_drops_removed_targets(server, scraper):
    scheduler = BackgroundScheduler(timezone=UTC)
    scheduler.start(paused=True)
    try:
        a, b = target("a", server.url("/vllm")), target("b", server.url("/vllm"))
        scraper.schedule(scheduler, [a, b])
        scraper.schedule(scheduler, [dataclasses.replace(a, interval_s=30)])
        (job,) = scheduler.get_jobs()
        assert job.id == scrape_job_id(a) == "scrape:a"
        assert job.trigger.interval == timedelta(seconds=30)
        assert job.executor == SCRAPE_EXECUTOR
    finally:
        scheduler.shutdown(wait=False)


# ---------------------------------------------------------------- the parser on its own
def test_openmetrics_and_classic_text_give_the_same_rows():
    vllm = FakeVllm()
    vllm.serve(42, {"stop": 1}, [0.5])
    tables = []
    for accept in (ACCEPT_HEADER, "text/plain;version=0.0.4"):
        encoder, content_type = choose_encoder(accept)
        tables.append(parse_exposition(encoder(vllm.registry).decode(), content_type, T0))
    om, classic = (t.drop_columns(["ts"]).to_pylist() for t in tables)
    key = lambda row: (row["metric"], row["series_key"], row["le"] or 0)  # noqa: E731
    assert sorted(om, key=key) == sorted(classic, key=key)
    assert {row["type"] for row in om} == {"counter", "gauge", "histogram"}


def test_sample_timestamps_are_kept_for_replay():
    # classic text carries milliseconds; a sample without one takes the scrape's time
    text = 'DCGM_FI_DEV_GPU_UTIL{gpu="0"} 50 1767614400123\nDCGM_FI_DEV_GPU_UTIL{gpu="1"} 60\n'
    rows = parse_exposition(text, "text/plain", T0).to_pylist()
    assert [r["ts"] for r in rows] == [datetime(2026, 1, 5, 12, 0, 0, 123000, tzinfo=UTC), T0]
    assert [r["type"] for r in rows] == ["unknown", "unknown"]
    with pytest.raises(ValueError, match="timezone-aware"):
        parse_exposition(text, "text/plain", datetime(2026, 1, 5))


def test_a_repeated_series_is_refused():
    with pytest.raises(ExpositionError, match="appears twice"):
        parse_exposition('x{a="1"} 1\nx{a="1"} 2\n', "text/plain", T0)


# ---------------------------------------------------------------- the bulk path (history replays)
def stored_rows(storage: Storage) -> tuple[list[tuple], list[tuple]]:
    """Every scrapes row (without when it was received) and every sample, in a fixed order."""
    scrapes = storage.fetchall("select * exclude (received_at) from scrapes order by target, ts")
    samples = storage.fetchall(
        "select ts, target, metric, family, type, map_entries(labels)::varchar, series_key, "
        "le, value from metric_samples order by target, ts, metric, series_key, le"
    )
    return scrapes, samples


def history_pages() -> list[tuple[ScrapeTarget, datetime, str]]:
    """A vLLM engine's and a dcgm-exporter's pages at 12 scrape times as their values change,
    and one page whose counter went negative (the parser drops that sample: the fast reading
    must not keep it) and one with a sample of another shape (a timestamp of its own)."""
    vllm = FakeVllm()
    encoder, _ = choose_encoder("text/plain;version=0.0.4")
    v, d = target("engine-0", "http://e0/metrics"), target("dcgm-0", "http://d0/", kind="dcgm")
    pages = []
    for i in range(12):
        ts = T0 + timedelta(seconds=15 * i)
        vllm.serve(100 + i, {"stop": i % 3, "length": i % 2}, [0.05 * (i + 1)] * (i % 4))
        pages.append((v, ts, encoder(vllm.registry).decode()))
        pages.append((d, ts, dcgm_text(util=5.0 * i, energy_mj=1_000_000 + 977 * i)))
    ts = T0 + timedelta(seconds=15 * 12)
    pages.append((d, ts, dcgm_text(util=7.5, energy_mj=-5)))
    stamped = dcgm_text(util=3, energy_mj=2_000_000).replace(
        '"} 3\n', f'"}} 3 {int(ts.timestamp() * 1000)}\n', 1
    )
    pages.append((d, ts + timedelta(seconds=15), stamped))
    return pages


def test_bulk_pages_store_the_rows_of_the_scrape_path(tmp_path):
    """Scraper.ingest_pages (one write, rows read through the page template) stores exactly
    what ingest_text (prometheus_client's parser, a write per scrape) stores."""
    pages = history_pages()
    content_type = "text/plain; version=0.0.4; charset=utf-8"
    with Storage(tmp_path / "a.duckdb") as a, Storage(tmp_path / "b.duckdb") as b:
        parsed, bulk = Scraper(a), Scraper(b)
        for t, ts, text in pages:
            assert parsed.ingest_text(t, text, content_type, ts).up
        results = bulk.ingest_pages(pages, content_type)
        # the fast reading was used (each target's template was learned), not only the parser
        assert len(bulk._reader._templates) == 2 and all(bulk._reader._templates.values())
        want, got = stored_rows(a), stored_rows(b)
        assert len(want[0]) == len(pages) and len(want[1]) > 12 * 40
        assert got == want
        assert sorted((r.target, r.ts, r.samples) for r in results) == [
            (t, ts, n) for ts, t, *_, n, _, _ in sorted(want[0], key=lambda r: (r[1], r[0]))
        ]
        # the negative counter was dropped on both paths, the rest of its page kept
        assert b.scalar("select count(*) from metric_samples where value < 0") == 0
        # a stored scrape replayed again is refused whole: nothing of the batch is written
        before = b.scalar("select count(*) from metric_samples")
        with pytest.raises(InferLedgerError):
            bulk.ingest_pages(pages[:2] + pages[:1], content_type)
        assert b.scalar("select count(*) from metric_samples") == before


def test_the_page_template_refuses_what_it_cannot_vouch_for():
    vllm = FakeVllm()
    vllm.serve(10, {"stop": 1}, [0.1])
    encoder, content_type = choose_encoder("text/plain;version=0.0.4")
    text = encoder(vllm.registry).decode()
    template = PageTemplate.learn(text, content_type, T0)
    assert template is not None
    assert template.read(text, T0).samples.equals(parse_exposition(text, content_type, T0))
    # another shape of page, a value the parser reads otherwise, a counter gone negative
    vllm.success.labels(MODEL, "0", "new-reason").inc()
    assert template.read(encoder(vllm.registry).decode(), T0) is None
    line = next(x for x in text.splitlines() if x.startswith("vllm:prompt_tokens_total"))
    assert template.read(text.replace(line, line.rsplit(" ", 1)[0] + " 1_0"), T0) is None
    assert template.read(text.replace(line, line.rsplit(" ", 1)[0] + " -1.0"), T0) is None
    # OpenMetrics and pages with timestamps of their own are always parsed
    om_encoder, om_type = choose_encoder(ACCEPT_HEADER)
    assert PageTemplate.learn(om_encoder(vllm.registry).decode(), om_type, T0) is None
    stamped = 'x{a="1"} 1 1767614400000\n'
    assert PageTemplate.learn(stamped, "text/plain", T0) is None
