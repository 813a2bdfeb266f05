"""The stand-in vLLM server (`inferledger simulate --serve`) against the tools people point at
vLLM: a real Prometheus scrapes it, and every panel of vLLM's and NVIDIA's Grafana dashboards
(tests/data/grafana/, sources in its README) must get data from it; `promtool check metrics`
must pass its pages but for what it also flags on real vLLM.

Nothing of ours is mocked: the SimServer serves on loopback ports with client traffic over real
sockets, and Debian's `prometheus` and `promtool` (scripts/setup --test installs them) do the
scraping, the PromQL and the lint. The dashboards' queries are evaluated as Grafana would send
them: variables resolved from the label-value queries that define them (All = every value, as a
regex alternation with Grafana's escaping), $__rate_interval = 4 scrape intervals and more.
"""

from __future__ import annotations

import itertools
import json
import math
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from inferledger.sim_server import SimServeOptions, SimServer, merge_expositions
from inferledger.sim_server.http_metrics import HIGHR_BUCKETS, LOWR_BUCKETS, HttpMetrics
from models.serving import (
    CacheConfig,
    ClusterConfig,
    ReplicaConfig,
    RouterPolicy,
    SchedulerConfig,
)
from models.steptime import build_predictor
from tests.conftest import ROOT, free_port, serving_sim

GRAFANA = ROOT / "tests" / "data" / "grafana"
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
SPEED = 20.0
SCRAPE_S = 1
RATE_INTERVAL = "10s"  # Grafana's $__rate_interval: at least 4 scrape intervals
PROMETHEUS = shutil.which("prometheus")
PROMTOOL = shutil.which("promtool")
needs_prometheus = pytest.mark.skipif(
    PROMETHEUS is None or PROMTOOL is None,
    reason="Debian's prometheus package (prometheus, promtool) is not installed: "
    "scripts/setup --test installs it",
)

# What `promtool check metrics` (2.42) also reports on a real vLLM's /metrics, and why it stays:
# the names are vLLM's own (vllm/v1/metrics/loggers.py), and dashboards query them by name.
VLLM_LINT_EXCEPTIONS = (
    # Every vLLM family is named "vllm:..." (a colon, which promtool reserves for recording rules).
    re.compile(r"^vllm:\w+ metric names should not contain ':'$"),
    # vllm:iteration_tokens_total is a histogram whose name ends in _total.
    re.compile(
        r'^vllm:iteration_tokens_total non-counter metrics should not have "_total" suffix$'
    ),
)


# -- the stand-in and its traffic ---------------------------------------------------------------


def _url(address: tuple[str, int]) -> str:
    return f"http://{_target(address)}"


def _target(address: tuple[str, int]) -> str:
    return f"{address[0]}:{address[1]}"


class Traffic:
    """Client loops against the router until stopped: streamed chat and plain completions of
    varied lengths, a shared prompt prefix (prefix-cache hits), some client disconnects mid
    stream (aborts) and some invalid requests (4xx)."""

    def __init__(self, url: str, workers: int = 4) -> None:
        self.url = url
        self.stop = threading.Event()
        self.sent = 0
        self.errors: list[str] = []
        self._threads = [
            threading.Thread(target=self._loop, args=(i,), daemon=True) for i in range(workers)
        ]

    def start(self) -> Traffic:
        for t in self._threads:
            t.start()
        return self

    def close(self) -> None:
        self.stop.set()
        for t in self._threads:
            t.join(30)

    def _loop(self, worker: int) -> None:
        session = requests.Session()
        shared = "You are a helpful assistant. " * 40
        for n in itertools.count():
            if self.stop.is_set():
                return
            kind = (n + worker) % 5
            max_tokens = 8 + (n * 7 + worker * 3) % 40
            try:
                if kind == 0:
                    session.post(self.url + "/v1/completions", json={"model": 1}, timeout=30)
                elif kind in (1, 2):
                    body = {
                        "model": MODEL,
                        "messages": [{"role": "user", "content": shared + f"question {n}"}],
                        "max_tokens": max_tokens,
                        "stream": True,
                    }
                    with session.post(
                        self.url + "/v1/chat/completions", json=body, stream=True, timeout=30
                    ) as resp:
                        resp.raise_for_status()
                        for i, _ in enumerate(resp.iter_lines()):
                            if kind == 2 and n % 3 == 0 and i == 3:
                                break  # the client goes away mid stream
                else:
                    prompt = f"worker {worker} request {n} " + "lorem ipsum " * (10 + 15 * kind)
                    body = {"model": MODEL, "prompt": prompt, "max_tokens": max_tokens}
                    session.post(self.url + "/v1/completions", json=body, timeout=30)
                self.sent += 1
                time.sleep(0.05)  # a steady few dozen requests a second in all
            except requests.RequestException as exc:
                self.errors.append(repr(exc))
                time.sleep(0.1)


class Stand:
    def __init__(self, server: SimServer) -> None:
        addrs = server.addresses
        self.server = server
        self.router = addrs["router"]
        self.replica = addrs["replica0"]
        self.dcgm = addrs["dcgm"]


@pytest.fixture(scope="module")
def stand() -> Iterator[Stand]:
    predictor = build_predictor("llama-3.1-8b", "h200")
    cluster = ClusterConfig(
        ReplicaConfig(
            CacheConfig(predictor.num_gpu_blocks()),
            SchedulerConfig(max_num_seqs=64, max_num_batched_tokens=2048, max_model_len=8192),
        ),
        num_replicas=2,
        router=RouterPolicy.LEAST_OUTSTANDING_REQUESTS,
    )
    options = SimServeOptions(
        cluster=cluster,
        predictor=predictor,
        served_model_names=(MODEL,),
        port=0,
        speed=SPEED,
        threads=32,
        drain_timeout_s=2.0,
    )
    with serving_sim(options) as (server, _):
        yield Stand(server)


class Prometheus:
    """A real Prometheus scraping the stand-in's router and dcgm pages every second."""

    def __init__(self, tmp: Path, stand: Stand) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = tmp / "prometheus.yml"
        config.write_text(
            json.dumps(  # YAML is a superset of JSON
                {
                    "global": {"scrape_interval": f"{SCRAPE_S}s", "scrape_timeout": "900ms"},
                    "scrape_configs": [
                        {
                            "job_name": "vllm",
                            "static_configs": [{"targets": [_target(stand.router)]}],
                        },
                        {
                            "job_name": "dcgm",
                            "static_configs": [{"targets": [_target(stand.dcgm)]}],
                        },
                    ],
                }
            )
        )
        self.log = tmp / "prometheus.log"
        self.proc = subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--log.level=warn",
            ],
            stdout=subprocess.DEVNULL,
            stderr=self.log.open("w"),
        )

    def wait_ready(self, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"prometheus exited: {self.log.read_text()[-2000:]}")
            try:
                if requests.get(self.url + "/-/ready", timeout=2).ok:
                    return
            except (requests.ConnectionError, requests.Timeout):
                pass
            time.sleep(0.2)
        raise AssertionError("prometheus did not become ready")

    def query(self, expr: str) -> list[dict]:
        resp = requests.get(self.url + "/api/v1/query", params={"query": expr}, timeout=10)
        body = resp.json()
        assert body.get("status") == "success", f"{expr}: {body}"
        result = body["data"]["result"]
        if body["data"]["resultType"] == "scalar":
            return [{"metric": {}, "value": result}]
        return result

    def label_values(self, label: str, match: str | None = None) -> list[str]:
        params = {"match[]": match} if match else {}
        resp = requests.get(f"{self.url}/api/v1/label/{label}/values", params=params, timeout=10)
        return resp.json()["data"]

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)


@pytest.fixture(scope="module")
def scraped(stand: Stand, tmp_path_factory) -> Iterator[Prometheus]:
    """Prometheus once it holds 12 s of scrapes with traffic running (and still running)."""
    if PROMETHEUS is None:
        pytest.skip("Debian's prometheus is not installed: scripts/setup --test installs it")
    traffic = Traffic(_url(stand.router)).start()
    prom = Prometheus(tmp_path_factory.mktemp("prometheus"), stand)
    try:
        prom.wait_ready()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            got = prom.query('count_over_time(up{job="vllm"}[1m])')
            if got and float(got[0]["value"][1]) >= 12:
                break
            time.sleep(0.5)
        else:
            raise AssertionError("prometheus did not scrape 12 times in a minute")
        up = {r["metric"]["job"]: r["value"][1] for r in prom.query("max_over_time(up[1m])")}
        assert up == {"vllm": "1", "dcgm": "1"}, up
        assert traffic.sent > 20 and not traffic.errors, (traffic.sent, traffic.errors[:3])
        yield prom
    finally:
        traffic.close()
        prom.close()


# -- the http_* families ------------------------------------------------------------------------


def _samples(page: str) -> dict[tuple[str, frozenset], float]:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(page)
        for s in family.samples
    }


def _value(samples: dict, name: str, **labels: str) -> float:
    want = set(labels.items())
    return sum(v for (n, lab), v in samples.items() if n == name and want <= lab)


def test_http_metrics_follow_prometheus_fastapi_instrumentator() -> None:
    """vLLM's Instrumentator(excluded_handlers=[...]).add() (see http_metrics' docstring): the
    five default families, excluded handlers matched with re.search before untemplated paths
    become "none", status classes, the default buckets, and one registry per listener."""
    m = HttpMetrics()
    m.observe("8000", "/v1/completions", "POST", 200, 0.3, 120, 512)
    m.observe("8000", "/v1/chat/completions", "POST", 200, 2.0, 300, 0)  # a stream
    m.observe("8000", "/v1/completions", "POST", 400, 0.002, 20, 90)
    m.observe("8000", "/v2/nothing", "GET", 404, 0.001)
    m.observe("8000", "/v1/completions", "BREW", 405, 0.001)
    m.observe("8000", "/v1/responses/r1", "GET", 404, 0.001, route="/v1/responses/<response_id>")
    for path in ("/metrics", "/health", "/ping", "/version", "/sim/metrics", "/healthz", "/load"):
        m.observe("8000", path, "GET", 200, 0.001)
    m.observe("8001", "/v1/models", "GET", 200, 0.004, 0, 200)
    page = m.render("8000")
    got = _samples(page)
    handlers = {dict(lab).get("handler") for (n, lab) in got if n == "http_requests_total"}
    assert handlers == {
        "/v1/completions",
        "/v1/chat/completions",
        "/v1/responses/{response_id}",
        "none",
    }
    assert _value(got, "http_requests_total", handler="/v1/completions", status="2xx") == 1
    assert _value(got, "http_requests_total", handler="/v1/completions", status="4xx") == 2
    assert _value(got, "http_requests_total", method="other", status="4xx") == 1
    assert _value(got, "http_requests_total", handler="none", method="GET", status="4xx") == 1
    assert _value(got, "http_request_size_bytes_sum", handler="/v1/completions") == 140
    assert _value(got, "http_request_size_bytes_count", handler="/v1/completions") == 3
    assert _value(got, "http_response_size_bytes_sum", handler="/v1/chat/completions") == 0
    assert _value(got, "http_request_duration_highr_seconds_count") == 6
    assert _value(got, "http_request_duration_highr_seconds_bucket", le="0.25") == 4
    assert _value(got, "http_request_duration_highr_seconds_bucket", le="0.5") == 5
    assert _value(
        got, "http_request_duration_seconds_sum", handler="/v1/chat/completions", method="POST"
    ) == pytest.approx(2.0)
    les = {dict(lab)["le"] for (n, lab) in got if n == "http_request_duration_seconds_bucket"}
    assert les == {"0.1", "0.5", "1.0", "+Inf"}
    assert len(HIGHR_BUCKETS) == 21 and LOWR_BUCKETS == (0.1, 0.5, 1)
    for family in ("http_requests_total", "http_request_size_bytes", "http_response_size_bytes"):
        assert f"# TYPE {family} " in page
    assert "# TYPE http_request_duration_highr_seconds histogram" in page
    assert "# TYPE http_request_duration_seconds histogram" in page
    other = _samples(m.render("8001"))
    assert _value(other, "http_requests_total") == 1
    assert _value(other, "http_requests_total", handler="/v1/models") == 1
    # A listener nothing was sent to still shows the unlabelled histogram, at zero.
    fresh = _samples(m.render("9999"))
    assert _value(fresh, "http_request_duration_highr_seconds_count") == 0


def test_a_series_without_an_engine_label_is_written_once_on_the_router_page() -> None:
    """vllm:admission_rejections belongs to vLLM's API server (labels model_name and reason):
    merging the engines' pages must not repeat it, which Prometheus and our own ingest reject."""
    a = (
        "# HELP r_total R.\n# TYPE r_total counter\n"
        'r_total{model_name="m",reason="x"} 0.0\n'
        "# HELP q_total Q.\n# TYPE q_total counter\n"
        'q_total{engine="0",model_name="m"} 1.0\n'
    )
    merged = merge_expositions([a, a.replace('engine="0"', 'engine="1"')])
    assert merged.count('r_total{model_name="m",reason="x"}') == 1
    assert merged.count("q_total{") == 2 and merged.count("# TYPE q_total") == 1


@pytest.mark.slow
def test_a_streams_http_duration_runs_to_its_last_chunk(stand: Stand) -> None:
    """The instrumentator observes a request when the app has sent all of it: a stream's
    http_request_duration_seconds covers every chunk, not just the response's start. Probes
    (/health, /metrics) are not counted. Replica 0's own listener, which no other test's
    traffic reaches."""
    url = _url(stand.replica)
    # ~1,500 decode steps: about half a second of wall time at 20x, in many chunks
    body = {
        "model": MODEL,
        "prompt": "count",
        "max_tokens": 1500,
        "ignore_eos": True,
        "stream": True,
    }
    started = time.monotonic()
    with requests.post(url + "/v1/completions", json=body, stream=True, timeout=60) as resp:
        assert resp.ok
        first = None
        for line in resp.iter_lines():
            if line and first is None:
                first = time.monotonic() - started
    wall = time.monotonic() - started
    assert requests.get(url + "/health", timeout=10).ok
    deadline = time.monotonic() + 10
    while stand.server.http_in_flight and time.monotonic() < deadline:
        time.sleep(0.01)  # the observation happens when waitress closes the body
    got = _samples(requests.get(url + "/metrics", timeout=10).text)
    labels = {"handler": "/v1/completions", "method": "POST"}
    assert _value(got, "http_request_duration_seconds_count", **labels) == 1
    duration = _value(got, "http_request_duration_seconds_sum", **labels)
    assert first is not None and wall - first > 0.2, (first, wall)  # the stream took a while
    assert wall * 0.9 <= duration <= wall + 0.05, (first, duration, wall)
    assert _value(got, "http_response_size_bytes_sum", handler="/v1/completions") == 0
    assert not any(dict(lab).get("handler") in ("/health", "/metrics") for (_, lab) in got)


# -- dashboards ---------------------------------------------------------------------------------


def _panels(panels: list[dict]) -> Iterator[dict]:
    for p in panels:
        if p.get("type") != "row":
            yield p
        yield from _panels(p.get("panels", []))


_REGEX_SPECIAL = re.compile(r"[\\^$*+?.()|\[\]{}]")


def _grafana_regex(values: list[str]) -> str:
    """Grafana's Prometheus interpolation of a multi-value variable: each value regex-escaped
    (the backslash doubled inside a PromQL string), joined as an alternation."""
    escaped = [_REGEX_SPECIAL.sub(lambda m: "\\\\" + m.group(0), v) for v in values]
    return escaped[0] if len(escaped) == 1 else "(" + "|".join(escaped) + ")"


def _substitute(expr: str, variables: dict[str, str]) -> str:
    builtins = {"__rate_interval": RATE_INTERVAL, "__interval": f"{SCRAPE_S}s", "__range": "1m"}

    def value(m: re.Match) -> str:
        name = m.group(1) or m.group(2)
        if name in builtins:
            return builtins[name]
        assert name in variables, f"unknown variable ${name} in {expr}"
        return variables[name]

    return re.sub(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)", value, expr)


def _variables(dashboard: dict, prom: Prometheus) -> dict[str, str]:
    """Each template variable's value as Grafana would interpolate it: a query variable from its
    label_values(...) query (All, or the first value where All is not offered), a custom one
    its current value; a data source or ad-hoc filter none."""
    out: dict[str, str] = {}
    for var in dashboard.get("templating", {}).get("list", []):
        name, typ = var["name"], var.get("type")
        if typ == "custom":
            out[name] = var["current"]["value"]
        elif typ == "query":
            query = var.get("definition") or var["query"]
            query = query["query"] if isinstance(query, dict) else query
            m = re.fullmatch(r"label_values\((?:(.*),\s*)?(\w+)\)", query.strip())
            assert m, f"variable {name}: {query}"
            match = _substitute(m.group(1), out) if m.group(1) else None
            values = sorted(prom.label_values(m.group(2), match))
            assert values, f"variable ${name} ({query}) has no values: its panels would be empty"
            if var.get("includeAll") or var.get("multi"):
                out[name] = _grafana_regex(values)
            else:
                out[name] = values[0]
        else:
            out[name] = ""
    return out


def _has_data(result: list[dict]) -> bool:
    """A query result a panel would draw: at least one finite value."""
    return any(math.isfinite(float(r["value"][1])) for r in result)


def _empty_panels(name: str, prom: Prometheus) -> tuple[int, list[str]]:
    dashboard = json.loads((GRAFANA / name).read_text())
    variables = _variables(dashboard, prom)
    panels = list(_panels(dashboard["panels"]))
    empty = []
    for panel in panels:
        exprs = [t["expr"] for t in panel.get("targets", []) if t.get("expr")]
        if not any(_has_data(prom.query(_substitute(e, variables))) for e in exprs):
            empty.append(f"{panel['title']}: {exprs}")
    return len(panels), empty


@pytest.mark.slow
@needs_prometheus
@pytest.mark.parametrize(
    "dashboard",
    [
        "vllm_overview.json",  # vLLM's current overview (vllm@8aed4e52)
        "vllm_legacy.json",  # vLLM 0.33.0's examples/observability/prometheus_grafana
        "dcgm-exporter-dashboard.json",  # NVIDIA/dcgm-exporter's grafana/
    ],
)
def test_every_dashboard_panel_gets_data(scraped: Prometheus, dashboard: str) -> None:
    count, empty = _empty_panels(dashboard, scraped)
    assert count >= 8
    assert not empty, f"{len(empty)} of {count} panels empty:\n" + "\n".join(empty)


# -- promtool -----------------------------------------------------------------------------------


def _promtool_problems(page: str) -> list[str]:
    proc = subprocess.run(
        [PROMTOOL, "check", "metrics"], input=page, capture_output=True, text=True, timeout=60
    )
    lines = [ln.strip() for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip()]
    if proc.returncode == 0:
        return []
    return [ln for ln in lines if not any(e.search(ln) for e in VLLM_LINT_EXCEPTIONS)]


@pytest.mark.slow
@needs_prometheus
@pytest.mark.parametrize("listener", ["router", "replica"])
def test_promtool_passes_the_vllm_pages_but_for_what_it_flags_on_vllm(
    scraped: Prometheus, stand: Stand, listener: str
) -> None:
    address = stand.router if listener == "router" else stand.replica
    page = requests.get(_url(address) + "/metrics", timeout=10).text
    assert "vllm:e2e_request_latency_seconds_bucket" in page
    assert "http_request_duration_seconds_bucket" in page or listener == "replica"
    assert _promtool_problems(page) == []
