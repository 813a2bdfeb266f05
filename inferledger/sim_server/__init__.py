"""`inferledger simulate --serve`: the serving simulator as a stand-in vLLM server (`__main__`
runs it as `python -m inferledger.sim_server`).

One process serves an OpenAI-compatible API (completions and chat, streaming or not) in front of
a LiveCluster (models/serving/live.py), plus what a vLLM deployment exposes for observability:
each replica's `/metrics` in vLLM's exposition, a dcgm-exporter page, and `llm_request` spans
over OTLP/HTTP. docs/sim-server.md is the user's guide (ports, flags, tokens, limits).
inferledger/sim_requests.py, sim_prompts.py, sim_outputs.py, sim_errors.py and sim_openai.py
hold the protocol (validation, tokenised prompts, what each choice generates, vLLM's errors,
response shapes); inferledger/sim_engine.py the simulation and span-export threads.

HTTP, as in inferledger/server.py: a Flask app (inferledger/sim_server/app.py: routes, error
bodies; exchange.py: submitting, waiting, streaming; extra_routes.py: the other vLLM
endpoints; http_metrics.py: the http_* metrics) served by waitress through
core.http_server.WaitressRunner.

Threads, as in inferledger/server.py: waitress's worker threads answer HTTP and wait on events;
ONE simulation thread owns the LiveCluster, maps wall time to virtual time
(virtual = speed x (wall - start)), submits arrivals, advances the clock to each step end that
matters and wakes the requests whose tokens or records are ready. A span exporter thread posts
finished requests' spans in batches from a bounded queue and never blocks a request.

Listeners (one waitress server, one socket each):
  --port P             the router: API for the whole cluster, /metrics of every replica
                       (engine="0".."N-1", as one vLLM API server with data parallelism)
  P + 1 + i            replica i alone: API sent straight to it, its /metrics (engine="0")
  --dcgm-port (9400)   dcgm-exporter's /metrics for every GPU of every replica
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import re
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from werkzeug.wsgi import ClosingIterator

from inferledger.core.errors import SettingsError
from inferledger.core.http_server import WaitressRunner, wait_until
from inferledger.sim_engine import (
    LAG_BUCKETS_S,
    SimEngine,
    SpanExporter,
    VirtualClock,
    traces_url,
)
from inferledger.sim_openai import ApiLimits
from inferledger.sim_server.app import Listener, create_app
from inferledger.sim_server.http_metrics import HttpMetrics
from models.execution_time import ExecutionTimePredictor
from models.serving.config import ClusterConfig, SimulationOptions
from models.serving.jitter import DEFAULT_STEP_JITTER_CV
from models.serving.live import LiveCluster
from models.serving.records import ReplicaRecord, RequestRecord
from models.serving.telemetry import GpuMetricsTimeline, ReplicaMetricsTimeline
from models.steptime import RooflinePredictor

log = logging.getLogger(__name__)

DCGM_HOST_PREFIX = "sim-gpu-node-"  # Hostname label of the simulated GPU hosts
MAX_BODY_BYTES = 32 << 20


# --- metrics pages ----------------------------------------------------------------------------

_FAMILY_START = re.compile(r"^# HELP (\S+)")


def merge_expositions(pages: Sequence[str]) -> str:
    """Pages with the same families in the same order (one per engine) → one page with each
    family's HELP/TYPE once, followed by its samples from every page in turn. A family starts
    at its `# HELP` line, as every page rendered here writes it. A series every page carries
    alike (one without an engine label, such as vllm:admission_rejections, which vLLM's API
    server exports once) is written once."""
    order: list[str] = [""]  # "": samples before any HELP line (none in our pages)
    headers: dict[str, list[str]] = {"": []}
    samples: dict[str, list[str]] = {"": []}
    seen: set[str] = set()
    for page in pages:
        family = ""
        in_header = False
        for line in page.splitlines():
            m = _FAMILY_START.match(line)
            if m:
                family = m.group(1)
                in_header = True
                if family not in headers:
                    order.append(family)
                    headers[family] = [line]
                    samples[family] = []
                continue
            if line.startswith("#"):
                if in_header and len(headers[family]) < 2:
                    headers[family].append(line)
                continue
            in_header = False
            series = line.rpartition(" ")[0]
            if series in seen:
                continue
            seen.add(series)
            samples[family].append(line)
    out = []
    for family in order:
        out.extend(headers[family])
        out.extend(samples[family])
    return "\n".join(out) + "\n"


# --- the server -------------------------------------------------------------------------------


@dataclass(frozen=True)
class SimServeOptions:
    """Everything `inferledger simulate --serve` needs: the deployment (cluster, predictor,
    names) and the server's own flags."""

    cluster: ClusterConfig
    predictor: ExecutionTimePredictor
    served_model_names: tuple[str, ...]
    host: str = "127.0.0.1"
    port: int = 8000  # 0: every listener on a free port (tests)
    dcgm_port: int | None = 9400  # None: no dcgm-exporter page
    speed: float = 1.0
    otlp_traces_endpoint: str | None = None
    # Worker threads = requests answered at once (each stream holds one). More requests than
    # this wait in waitress's queue, where no vllm: metric sees them (docs/sim-server.md,
    # "Disconnects, keep-alive and timing"): keep it above the concurrency clients use.
    threads: int = 1024
    # Coefficient of variation of the seeded, mean-1 noise on every engine step's duration
    # (models/serving/jitter.py); 0 = the predictor's exact step times.
    step_jitter: float = DEFAULT_STEP_JITTER_CV
    seed: int = 0  # seeds the jitter: each replica draws from its own generator
    sample_interval_s: float = 1.0
    drain_timeout_s: float = 5.0
    # labels of vllm:cache_config_info, as `vllm serve` was told
    gpu_memory_utilization: float = 0.9
    cache_dtype: str = "auto"
    service_name: str = field(default_factory=lambda: os.environ.get("OTEL_SERVICE_NAME", "vllm"))

    def __post_init__(self) -> None:
        if not self.served_model_names:
            raise SettingsError("at least one served model name is needed")
        if not 1 <= self.threads <= 4096:
            raise SettingsError(f"--threads must be in 1..4096, got {self.threads}")
        if not (math.isfinite(self.step_jitter) and 0.0 <= self.step_jitter <= 1.0):
            raise SettingsError(f"--step-jitter must be in 0..1, got {self.step_jitter}")
        for name, port in (("--port", self.port), ("--dcgm-port", self.dcgm_port)):
            if port is not None and not 0 <= port <= 65535:
                raise SettingsError(f"{name} must be in 0..65535, got {port}")
        if self.port and self.port + self.cluster.num_replicas > 65535:
            raise SettingsError("--port + the number of replicas must stay below 65536")
        VirtualClock(self.speed)  # validates the speed
        if isinstance(self.predictor, RooflinePredictor) and 8 % self.predictor.profile.tp:
            raise SettingsError("the dcgm-exporter page needs a tensor-parallel size dividing 8")


class SimServer:
    """The HTTP face of the simulation: SimServer(options).bind(), then serve_forever() until
    SIGTERM/SIGINT or request_stop()."""

    def __init__(self, options: SimServeOptions) -> None:
        self.options = options
        cluster = options.cluster
        sched, cache = cluster.replica.scheduler, cluster.replica.cache
        kv_tokens = cache.num_gpu_blocks * cache.block_size
        self.max_model_len = min(sched.max_model_len, kv_tokens + 1)
        if self.max_model_len < sched.max_model_len:
            # vLLM refuses to start in this case; the simulator lowers the limit instead.
            log.warning(
                "max_model_len %d does not fit the KV cache (%d tokens); serving at most %d",
                sched.max_model_len,
                kv_tokens,
                self.max_model_len,
            )
        self.limits = ApiLimits(options.served_model_names, self.max_model_len, cache.block_size)
        self.served_model_names = options.served_model_names
        self.model_name = options.served_model_names[0]
        self.created = int(time.time())
        self.epoch_ns = time.time_ns()
        self.clock = VirtualClock(options.speed)
        sim_options = SimulationOptions(sample_interval_s=options.sample_interval_s)
        self.live = LiveCluster(
            cluster,
            options.predictor,
            sim_options,
            step_jitter_cv=options.step_jitter,
            seed=options.seed,
        )
        self.exporter: SpanExporter | None = None
        if options.otlp_traces_endpoint:
            self.exporter = SpanExporter(
                traces_url(options.otlp_traces_endpoint),
                epoch_ns=self.epoch_ns,
                resource={"service.name": options.service_name},
            )
        self.engine = SimEngine(
            self.live, self.clock, self.exporter.offer if self.exporter else None
        )
        self._listeners: list[Listener] = []
        self._roles: dict[str, Listener] = {}
        self._inflight = 0
        self._inflight_lock = threading.Lock()
        self._stop = threading.Event()
        self.ready = threading.Event()
        self.http_requests = HttpMetrics()
        self.app = create_app(self)

    # ------------------------------------------------------------------ lifecycle
    @property
    def addresses(self) -> dict[str, tuple[str, int]]:
        """Where each listener is: "router", "replica0".., "dcgm" → (host, port)."""
        out = {}
        for lst in self._listeners:
            name = lst.role if lst.replica is None else f"replica{lst.replica}"
            host, port = lst.sock.getsockname()[:2]
            out[name] = (str(host), int(port))
        return out

    def bind(self) -> SimServer:
        """Open every listening socket (so that a port in use fails before anything starts)."""
        opts = self.options
        plan: list[tuple[str, int | None, int]] = [("router", None, opts.port)]
        for i in range(opts.cluster.num_replicas):
            plan.append(("replica", i, opts.port + 1 + i if opts.port else 0))
        if opts.dcgm_port is not None:
            plan.append(("dcgm", None, opts.dcgm_port if opts.port else 0))
        try:
            for role, replica, port in plan:
                family = socket.AF_INET6 if ":" in opts.host else socket.AF_INET
                sock = socket.socket(family, socket.SOCK_STREAM)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    sock.bind((opts.host, port))
                except OSError as exc:
                    sock.close()
                    raise SettingsError(f"cannot listen on {opts.host}:{port}: {exc}") from None
                self._listeners.append(Listener(role, replica, sock))
        except SettingsError:
            for lst in self._listeners:
                lst.sock.close()
            self._listeners = []
            raise
        self._roles = {str(lst.sock.getsockname()[1]): lst for lst in self._listeners}
        return self

    @property
    def http_in_flight(self) -> int:
        """HTTP requests being answered; a stream counts until waitress is done with its body
        (finished, or the client gone). Shutdown drains these."""
        return self._inflight

    def listener_at(self, port: str) -> Listener | None:
        """The listener bound to `port` (a request's SERVER_PORT); None for any other."""
        return self._roles.get(port)

    def request_stop(self) -> None:
        self._stop.set()

    def serve_forever(self, install_signal_handlers: bool = True) -> int:
        """Serve until SIGTERM/SIGINT (or request_stop()), then shut down; returns 0."""
        if not self._listeners:
            self.bind()
        opts = self.options
        # http_runner: its queued_now / queued_total / busy_threads show requests waiting for
        # a worker thread, before the simulation sees them.
        runner = self.http_runner = WaitressRunner(
            self.wsgi_app,
            sockets=[lst.sock for lst in self._listeners],
            threads=opts.threads,
            # Connections stay open after streams, as with vLLM's uvicorn (clients reuse them).
            keep_alive_streams=True,
            # Read ahead on each connection so that a client gone while its request waits is
            # seen (environ["waitress.client_disconnected"]) and the request aborted.
            channel_request_lookahead=1,
            # Every streamed response holds a worker thread and a connection until it ends;
            # idle keep-alive connections hold one too.
            connection_limit=max(100, 4 * opts.threads),
            ident="inferledger-sim",
            max_request_body_size=MAX_BODY_BYTES,
            channel_timeout=300,
            clear_untrusted_proxy_headers=True,
        )
        if install_signal_handlers:
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, lambda *_: self._stop.set())
        self.engine.start()
        if self.exporter is not None:
            self.exporter.start()
        runner.start()
        self.ready.set()
        addrs = self.addresses
        print(
            f"inferledger simulate --serve: model {self.model_name!r}, "
            f"{opts.cluster.num_replicas} replica(s), speed {opts.speed:g}x\n"
            + "".join(f"  {name:<9} http://{h}:{p}\n" for name, (h, p) in addrs.items()),
            end="",
            flush=True,
        )
        try:
            while not self._stop.wait(0.5):
                if not runner.alive:
                    log.error("HTTP loop stopped unexpectedly")
                    break
                if not self.engine.alive:
                    log.error("simulation thread stopped unexpectedly")
                    break
        finally:
            self._shutdown(runner)
        log.info("simulator stopped cleanly")
        return 0

    def _shutdown(self, runner: WaitressRunner) -> None:
        """Stop accepting; let in-flight requests finish (drain_timeout_s), abort the rest in
        the simulation so their responses end with finish_reason "abort"; flush spans."""
        self.ready.clear()
        self.engine.stop_accepting()
        runner.stop_accepting()
        if not wait_until(lambda: not self._inflight, self.options.drain_timeout_s):
            log.warning("aborting %d request(s) still in flight", self._inflight)
            self.engine.abort_all()
            wait_until(lambda: not self._inflight, 5.0)
        self.engine.stop()
        if self.exporter is not None:
            self.exporter.stop()
        runner.close()

    # ------------------------------------------------------------------ HTTP
    def wsgi_app(
        self, environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterable[bytes]:
        """The Flask app, with every request counted in flight until waitress is done with its
        body (a stream: finished or the client gone), so that shutdown can drain them."""
        with self._inflight_lock:
            self._inflight += 1
        try:
            body = self.app(environ, start_response)
        except BaseException:
            self._release()
            raise
        return ClosingIterator(body, self._release)

    def _release(self) -> None:
        with self._inflight_lock:
            self._inflight -= 1

    # ------------------------------------------------------------------ metrics
    def metrics_page(self, listener: Listener) -> str:
        """The /metrics page of the router (every replica) or of one replica: the engines'
        vllm: families, then the listener's http_* families (as vLLM registers its engine's
        stat loggers before the API server's instrumentator). The simulator's own
        inferledger_sim_* series are on the router's /sim/metrics (sim_metrics_page), not here:
        a vLLM dashboard or scraper sees only what vLLM exports."""
        now, replicas, records = self.engine.snapshot()
        created = self.created
        if listener.replica is not None:
            page = self._replica_page(replicas[listener.replica], records, now, "0", created)
        else:
            pages = [
                self._replica_page(rep, records, now, str(rep.index), created) for rep in replicas
            ]
            page = merge_expositions(pages)
        return page + self.http_requests.render(str(listener.sock.getsockname()[1]))

    def sim_metrics_page(self) -> str:
        """The router's /sim/metrics: the simulator's own inferledger_sim_* series."""
        return self._own_metrics()

    def _replica_page(
        self,
        replica: ReplicaRecord,
        records: list[RequestRecord],
        now: float,
        engine: str,
        created: float,
    ) -> str:
        timeline = ReplicaMetricsTimeline(
            replica,
            records,
            model_name=self.model_name,
            engine=engine,
            config=self.options.cluster.replica,
            max_model_len=self.max_model_len,
            gpu_memory_utilization=self.options.gpu_memory_utilization,
            cache_dtype=self.options.cache_dtype,
            created_unix_s=created,
        )
        return timeline.render(now)

    def dcgm_page(self) -> str:
        """Every GPU of every replica, as dcgm-exporters on 8-GPU hosts would show them:
        replica i's tensor-parallel GPUs are global GPUs i*TP .. i*TP+TP-1, eight per host.
        Every field of dcgm-exporter's default counters (docs/sim-server.md, "dcgm-exporter
        page"). The energy counter starts at the most power a catalog GPU draws x the host's
        uptime at the first scrape, so that it never goes backwards when the stand-in restarts
        (restart_safe_energy_offset_mj), and advances at wall-clock rates whatever --speed."""
        from models.serving.dcgm_metrics import restart_safe_energy_offset_mj

        predictor = self.options.predictor
        if not isinstance(predictor, RooflinePredictor):
            return ""  # no GPU or model to describe (a test predictor)
        # Read once per process; setdefault keeps the first value if two scrapes race.
        uptime_s = self.__dict__.setdefault("_dcgm_host_uptime_s", self._host_uptime_s())
        energy_offset_mj = restart_safe_energy_offset_mj(uptime_s)
        now, replicas, _ = self.engine.snapshot()
        tp = predictor.profile.tp
        pages = []
        for rep in replicas:
            first = rep.index * tp
            timeline = GpuMetricsTimeline(
                rep,
                gpu=predictor.gpu,
                model=predictor.profile,
                hostname=f"{DCGM_HOST_PREFIX}{first // 8}",
                first_gpu=first % 8,
                block_size=self.options.cluster.replica.cache.block_size,
                boot_s=0.0,
                driver_version="570.133.20",  # a datacenter R570 driver
                fields="default-counters",
                energy_offset_mj=energy_offset_mj,
                speed=self.options.speed,
            )
            pages.append(timeline.render(now))
        return merge_expositions(pages)

    @staticmethod
    def _host_uptime_s() -> float:
        """Seconds since the host booted (/proc/uptime); elsewhere the monotonic clock, which
        counts from boot on Linux and macOS too."""
        try:
            with open("/proc/uptime", encoding="ascii") as f:
                return float(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            return time.monotonic()

    def _own_metrics(self) -> str:
        e = self.engine
        x = self.exporter
        lines = [
            "# HELP inferledger_sim_virtual_seconds Virtual (simulated) time of the cluster.",
            "# TYPE inferledger_sim_virtual_seconds gauge",
            f"inferledger_sim_virtual_seconds {self.live.now!r}",
            "# HELP inferledger_sim_requests_in_flight Requests submitted and not finished.",
            "# TYPE inferledger_sim_requests_in_flight gauge",
            f"inferledger_sim_requests_in_flight {e.in_flight}",
            "# HELP inferledger_sim_loop_busy_seconds_total Wall time the simulation thread "
            "spent simulating.",
            "# TYPE inferledger_sim_loop_busy_seconds_total counter",
            f"inferledger_sim_loop_busy_seconds_total {e.busy_s!r}",
            "# HELP inferledger_sim_publish_lag_seconds Wall delay between a step end or "
            "finish in virtual time and its tokens or response being handed to the client.",
            "# TYPE inferledger_sim_publish_lag_seconds histogram",
            *_lag_buckets(e.lag_buckets),
            f"inferledger_sim_publish_lag_seconds_sum {e.lag_sum_s!r}",
            f"inferledger_sim_publish_lag_seconds_count {e.lag_count}",
            "# HELP inferledger_sim_publish_lag_max_seconds Worst publication lag so far.",
            "# TYPE inferledger_sim_publish_lag_max_seconds gauge",
            f"inferledger_sim_publish_lag_max_seconds {e.max_lag_s!r}",
            "# HELP inferledger_sim_client_aborts_total Requests aborted because their client "
            "went away.",
            "# TYPE inferledger_sim_client_aborts_total counter",
            f"inferledger_sim_client_aborts_total {e.client_aborts}",
        ]
        runner = getattr(self, "http_runner", None)
        if runner is not None:
            lines += [
                "# HELP inferledger_sim_http_queue_depth Requests waiting for an HTTP worker "
                "thread, not yet seen by the simulation.",
                "# TYPE inferledger_sim_http_queue_depth gauge",
                f"inferledger_sim_http_queue_depth {runner.queued_now}",
                "# HELP inferledger_sim_http_queued_requests_total Requests that found every "
                "HTTP worker thread busy and waited for one.",
                "# TYPE inferledger_sim_http_queued_requests_total counter",
                f"inferledger_sim_http_queued_requests_total {runner.queued_total}",
                "# HELP inferledger_sim_http_busy_threads HTTP worker threads answering a request.",
                "# TYPE inferledger_sim_http_busy_threads gauge",
                f"inferledger_sim_http_busy_threads {runner.busy_threads}",
            ]
        if x is not None:
            lines += [
                "# HELP inferledger_sim_spans_exported_total llm_request spans accepted by the "
                "OTLP endpoint.",
                "# TYPE inferledger_sim_spans_exported_total counter",
                f"inferledger_sim_spans_exported_total {x.exported}",
                "# HELP inferledger_sim_spans_dropped_total llm_request spans dropped.",
                "# TYPE inferledger_sim_spans_dropped_total counter",
                'inferledger_sim_spans_dropped_total{reason="queue_full"} '
                f"{x.dropped_queue_full}",
                f'inferledger_sim_spans_dropped_total{{reason="export_failed"}} '
                f"{x.dropped_export_failed}",
            ]
        return "\n".join(lines) + "\n"


def _lag_buckets(per_bucket: Sequence[int]) -> list[str]:
    lines = []
    total = 0
    for bound, count in zip((*LAG_BUCKETS_S, math.inf), per_bucket, strict=True):
        total += count
        le = "+Inf" if bound == math.inf else repr(bound)
        lines.append(f'inferledger_sim_publish_lag_seconds_bucket{{le="{le}"}} {total}')
    return lines


# --- command line -----------------------------------------------------------------------------


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of `inferledger simulate --serve` (the deployment's own flags — model, GPU,
    replicas — belong to `inferledger simulate`)."""
    group = parser.add_argument_group("serving (--serve)")
    group.add_argument(
        "--serve",
        action="store_true",
        help="run as a stand-in vLLM server (OpenAI API, /metrics, traces) instead of a batch run",
    )
    group.add_argument("--host", default="127.0.0.1", help="listen address [127.0.0.1]")
    group.add_argument(
        "--port",
        type=int,
        default=8000,
        help="router/API port; replica i listens on PORT+1+i; 0 = free ports [8000]",
    )
    group.add_argument(
        "--dcgm-port",
        type=int,
        default=9400,
        help="dcgm-exporter page port; -1 = none [9400]",
    )
    group.add_argument(
        "--speed",
        type=float,
        default=1.0,
        help="virtual seconds per wall second (1 = real time) [1]",
    )
    group.add_argument(
        "--served-model-name",
        nargs="+",
        default=None,
        metavar="NAME",
        help="model name(s) the API accepts; the first labels metrics "
        "[the model's Hugging Face id, then --model and the catalog name]",
    )
    group.add_argument(
        "--otlp-traces-endpoint",
        default=None,
        metavar="URL",
        help="post llm_request spans here (OTLP/HTTP protobuf, e.g. http://host:4318/v1/traces)",
    )
    group.add_argument(
        "--threads",
        type=int,
        default=1024,
        help="HTTP worker threads = requests answered at once; more wait unseen by the "
        "vllm: metrics [1024]",
    )
    group.add_argument(
        "--step-jitter",
        type=float,
        default=DEFAULT_STEP_JITTER_CV,
        metavar="CV",
        help="seeded noise on engine step times, as a coefficient of variation; 0 = the "
        f"predictor's exact times [{DEFAULT_STEP_JITTER_CV:g}]",
    )


def serve_options_from_scenario(args: argparse.Namespace, scenario: Any) -> SimServeOptions:
    """SimServeOptions from add_serve_arguments' flags and the deployment half of an
    `inferledger simulate` scenario (models.serving.scenario.ScenarioConfig; its traffic
    fields are not used: clients send the traffic)."""
    from models.model_catalog import get_model
    from models.serving.scenario_run import cluster_config, resolve_engine

    engine, predictor = resolve_engine(scenario)
    hf_id = get_model(engine.model).hf_id
    if args.speed is None or not (args.speed > 0 and math.isfinite(args.speed)):
        raise SettingsError(f"--speed must be a finite number > 0, got {args.speed}")
    return SimServeOptions(
        cluster=cluster_config(scenario, engine),
        predictor=predictor,
        # Without --served-model-name, vLLM serves (and labels its metrics with) the --model it
        # was started with, a Hugging Face id: that name first, then the --model string as given
        # and the catalog's name, which the API also accepts.
        served_model_names=tuple(
            args.served_model_name
            or dict.fromkeys(n for n in (hf_id, scenario.model, engine.model) if n)
        ),
        host=args.host,
        port=args.port,
        dcgm_port=None if args.dcgm_port < 0 else args.dcgm_port,
        speed=args.speed,
        otlp_traces_endpoint=args.otlp_traces_endpoint,
        threads=args.threads,
        step_jitter=args.step_jitter,
        seed=scenario.seed,
        gpu_memory_utilization=engine.gpu_memory_utilization,
        cache_dtype=scenario.kv_cache_dtype,
    )


def serve_simulation(options: SimServeOptions) -> int:
    """Run the simulator as a server until SIGTERM/SIGINT; returns the exit code (0)."""
    if not logging.getLogger().handlers:
        logging.basicConfig(
            level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
        )
    server = SimServer(options)
    server.bind()
    return server.serve_forever()
