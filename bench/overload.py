"""Overload and durability benchmark: a real `inferledger serve` on loopback (issue #17).

Three parts, each on a fresh server with default settings (sign-in on, one bench user):

1. large: ``--clients`` senders post ``--requests`` unique bodies each of LLM spans carrying a
   ``--prompt-kb`` prompt attribute (~``--body-mb`` MB per body), retrying each 503 after its
   Retry-After, while a prober signs in (GET + POST /login) and GETs /healthz every 0.25 s.
   Prints the server's RSS before and at peak, the 503s, the probes' latency, and that every
   acknowledged span is committed (no wedged writer, nothing quarantined).
2. ordinary: the same senders post 2,000-span requests of ordinary vLLM spans: peak RSS.
3. durability: senders post large bodies; the server is SIGKILLed after ``--kill-after`` 200s;
   it restarts on the same database, replays its spool and stops cleanly; every span of every
   acknowledged request must be in the database.

    .venv/bin/python bench/overload.py [--clients 12] [--requests 3] [--body-mb 60]
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import requests
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from inferledger.core.storage import Storage  # noqa: E402
from inferledger.fixtures import make_export_request  # noqa: E402

PB = {"Content-Type": "application/x-protobuf"}
USER, PASSWORD = "bench", "overload-bench-password-1"
SERVER_ENV: dict[str, str] = {}  # --server-env KEY=VALUE
COMMITTED = ("inferledger_spans_accepted_total ", "inferledger_spans_duplicate_total ")


# --------------------------------------------------------------------------- payloads
def large_request(client: int, prompt_kb: int, n_spans: int) -> ExportTraceServiceRequest:
    """``n_spans`` vLLM spans, each with a distinct ``prompt_kb`` KB prompt attribute."""
    rng = random.Random(client)
    text = "".join(rng.choices("abcdefghijklmnopqrstuvwxyz     ", k=prompt_kb * 1024 + 4096))
    req = make_export_request(n_spans, seed=client)
    for i, span in enumerate(req.resource_spans[0].scope_spans[0].spans):
        kv = span.attributes.add()
        kv.key = "gen_ai.prompt"
        kv.value.string_value = text[i % 4096 : i % 4096 + prompt_kb * 1024]
    return req


def stamp(req: ExportTraceServiceRequest, client: int, seq: int) -> bytes:
    """The request's spans all get trace id (client, seq): unique per request, easy to count."""
    trace_id = trace_hex(client, seq)
    for span in req.resource_spans[0].scope_spans[0].spans:
        span.trace_id = bytes.fromhex(trace_id)
    return req.SerializeToString()


def trace_hex(client: int, seq: int) -> str:
    return ((client + 1) << 64 | (seq + 1)).to_bytes(16, "big").hex()  # never all zeros


# --------------------------------------------------------------------------- the server
@dataclass
class Server:
    db: Path
    port: int
    log: Path
    proc: subprocess.Popen[bytes] | None = None
    rss_samples: list[int] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Server:
        env = {k: v for k, v in os.environ.items() if not k.startswith("INFERLEDGER_")}
        env.update(SERVER_ENV)
        cmd = [sys.executable, "-m", "inferledger.cli", "serve", "--db", str(self.db)]
        cmd += ["--port", str(self.port), "--log-level", "warning"]
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=log)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if requests.get(self.url + "/readyz", timeout=1).ok:
                    threading.Thread(target=self._sample_rss, daemon=True).start()
                    return self
            except (requests.ConnectionError, requests.Timeout):
                time.sleep(0.1)
        self.proc.kill()
        raise SystemExit(f"server did not become ready; see {self.log}")

    def _sample_rss(self) -> None:
        proc = self.proc
        while proc is not None and proc.poll() is None:
            try:
                self.rss_samples.append(_status_kib(proc.pid, "VmRSS:"))
            except (OSError, ValueError):
                return
            time.sleep(0.1)

    def rss_mib(self) -> float:
        assert self.proc is not None
        return _status_kib(self.proc.pid, "VmRSS:") / 1024

    def peak_rss_mib(self) -> float:
        assert self.proc is not None
        return _status_kib(self.proc.pid, "VmHWM:") / 1024

    def metric(self, prefix: str) -> float:
        total = 0.0
        for line in requests.get(self.url + "/metrics", timeout=30).text.splitlines():
            if line.startswith(prefix):
                total += float(line.split()[-1])
        return total

    def committed(self) -> float:
        return sum(self.metric(p) for p in COMMITTED)

    def wait_committed(self, target: float, timeout_s: float = 900) -> float:
        t0 = time.monotonic()
        while self.committed() < target:
            if time.monotonic() - t0 > timeout_s:
                raise SystemExit(f"spans acknowledged but not committed in {timeout_s} s: wedged?")
            time.sleep(0.2)
        return time.monotonic() - t0

    def stop(self) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(300)

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(60)


def _status_kib(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key):
            return int(line.split()[1])
    raise ValueError(key)


def add_user(db: Path) -> None:
    cmd = [sys.executable, "-m", "inferledger.cli", "users", "add", USER, "--role", "viewer"]
    cmd += ["--db", str(db), "--password-stdin"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("INFERLEDGER_")}
    subprocess.run(cmd, cwd=ROOT, env=env, input=PASSWORD + "\n", text=True, check=True)


def free_port() -> int:
    from inferledger.core.net import free_port as pick

    return pick()


# --------------------------------------------------------------------------- load
@dataclass
class Load:
    acked: list[tuple[int, int, int]] = field(default_factory=list)  # client, seq, spans
    refused: int = 0
    errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def send(
    url: str, make: object, clients: int, per_client: int, load: Load, stop: threading.Event
) -> float:
    def worker(client: int) -> None:
        session = requests.Session()
        req = make(client)  # type: ignore[operator]
        n = len(req.resource_spans[0].scope_spans[0].spans)
        for seq in range(per_client):
            if stop.is_set():
                return
            body = stamp(req, client, seq)
            while not stop.is_set():
                try:
                    r = session.post(url + "/v1/traces", data=body, headers=PB, timeout=600)
                except requests.RequestException as exc:
                    with load.lock:
                        load.errors.append(type(exc).__name__)
                    return  # the server went away: this request was not acknowledged
                if r.status_code == 503:
                    with load.lock:
                        load.refused += 1
                    time.sleep(float(r.headers.get("Retry-After", "1")))
                    continue
                with load.lock:
                    if r.status_code == 200:
                        load.acked.append((client, seq, n))
                    else:
                        load.errors.append(f"{r.status_code} {r.text[:120]}")
                break

    threads = [threading.Thread(target=worker, args=(c,)) for c in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - t0


class Prober:
    """Signs in and reads /healthz every 0.25 s while the load runs."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.sign_in: list[float] = []
        self.health: list[float] = []
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Prober:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(120)

    def _run(self) -> None:
        import re

        while not self._stop.wait(0.25):
            try:
                t0 = time.perf_counter()
                requests.get(self.url + "/healthz", timeout=60).raise_for_status()
                self.health.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                s = requests.Session()
                page = s.get(self.url + "/login", timeout=60).text
                csrf = re.search(r'name="csrf" value="([^"]+)"', page)
                data = {"name": USER, "password": PASSWORD, "next": "/"}
                data["csrf"] = csrf.group(1) if csrf else ""
                r = s.post(self.url + "/login", data=data, allow_redirects=False, timeout=60)
                if r.status_code != 303:
                    self.failures.append(f"sign-in {r.status_code}")
                self.sign_in.append(time.perf_counter() - t0)
            except requests.RequestException as exc:
                self.failures.append(type(exc).__name__)


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def show_latency(name: str, values: list[float]) -> None:
    print(
        f"  {name}: n={len(values)} p50 {1000 * pct(values, 0.5):.0f} ms, "
        f"p95 {1000 * pct(values, 0.95):.0f} ms, max {1000 * max(values, default=0):.0f} ms"
    )


# --------------------------------------------------------------------------- parts
def part_overload(tmp: Path, name: str, make: object, args: argparse.Namespace) -> None:
    db = tmp / f"{name}.duckdb"
    add_user(db)
    srv = Server(db, free_port(), tmp / f"{name}.log").start()
    try:
        rss0 = srv.rss_mib()
        load, stop = Load(), threading.Event()
        with Prober(srv.url) as probe:
            t_ack = send(srv.url, make, args.clients, args.requests, load, stop)
            spans = sum(n for _, _, n in load.acked)
            t_commit = srv.wait_committed(spans)
        quarantined = srv.metric("inferledger_ingest_requests_quarantined_total")
        peak = srv.peak_rss_mib()
    finally:
        code = srv.stop()
    print(f"[{name}] {args.clients} clients x {args.requests} requests")
    print(f"  acknowledged {len(load.acked)} requests = {spans:,} spans in {t_ack:.1f} s")
    print(f"  then all committed {t_commit:.1f} s later; quarantined {quarantined:.0f}")
    print(f"  503 answers (each retried after Retry-After): {load.refused}")
    print(f"  other errors: {load.errors[:3] or 'none'}; clean stop exit code {code}")
    print(f"  server RSS: {rss0:,.0f} MiB at start, peak {peak:,.0f} MiB")
    show_latency("GET /healthz", probe.health)
    show_latency("sign-in (GET + POST /login)", probe.sign_in)
    if probe.failures:
        print(f"  probe failures: {probe.failures[:5]}")


def part_durability(tmp: Path, args: argparse.Namespace) -> None:
    db = tmp / "durability.duckdb"
    srv = Server(db, free_port(), tmp / "durability.log").start()
    load, stop = Load(), threading.Event()

    def killer() -> None:
        while len(load.acked) < args.kill_after:
            time.sleep(0.01)
        srv.kill()  # SIGKILL: no flush, no goodbye
        stop.set()

    k = threading.Thread(target=killer)
    k.start()
    make = lambda c: large_request(c, args.prompt_kb, args.durability_spans)  # noqa: E731
    send(srv.url, make, args.clients, 10**6, load, stop)
    k.join()
    spool = Path(f"{db}.spool")
    spooled = len(list(spool.glob("*.otlp")))
    again = Server(db, free_port(), tmp / "durability-2.log")
    t0 = time.perf_counter()
    again.start()
    expected = {trace_hex(c, s): n for c, s, n in load.acked}
    t_ready = time.perf_counter() - t0
    replay_peak = 0.0
    # Wait until the replayed spool is written (its files are deleted after each commit).
    deadline = time.monotonic() + 900
    while list(spool.glob("*.otlp")) and time.monotonic() < deadline:
        time.sleep(0.2)
    t_replay = time.perf_counter() - t0
    replay_peak = again.peak_rss_mib()
    code = again.stop()
    with Storage(db) as st:
        stored = dict(st.fetchall("select trace_id, count(*) from spans group by trace_id"))
    lost = {t: n for t, n in expected.items() if stored.get(t, 0) < n}
    print(
        f"[durability] SIGKILL after {len(load.acked)} acknowledged requests "
        f"({sum(expected.values()):,} spans; {spooled} spooled requests not yet written)"
    )
    print(
        f"  restart: ready in {t_ready:.1f} s, spool replayed in {t_replay:.1f} s, "
        f"peak RSS {replay_peak:,.0f} MiB; clean stop exit code {code}"
    )
    print(f"  acknowledged requests missing spans after restart: {len(lost)} (must be 0)")
    if lost:
        raise SystemExit("acknowledged spans were lost")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=12)
    ap.add_argument("--requests", type=int, default=3, help="large requests per client")
    ap.add_argument("--prompt-kb", type=int, default=35)
    ap.add_argument("--body-mb", type=int, default=60, help="size of one large request")
    ap.add_argument("--ordinary-requests", type=int, default=25, help="per client")
    ap.add_argument("--durability-spans", type=int, default=200, help="spans per request")
    ap.add_argument("--kill-after", type=int, default=40, help="200s before the SIGKILL")
    ap.add_argument("--parts", default="large,ordinary,durability")
    ap.add_argument(
        "--server-env", action="append", default=[], metavar="KEY=VALUE", help="server setting"
    )
    args = ap.parse_args()
    SERVER_ENV.update(kv.split("=", 1) for kv in args.server_env)
    per_body = max(1, args.body_mb * 1024 // (args.prompt_kb + 1))
    print(f"{os.cpu_count()} CPUs; large requests: {per_body} spans x {args.prompt_kb} KB prompts")
    parts = args.parts.split(",")
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        if "large" in parts:
            part_overload(tmp, "large", lambda c: large_request(c, args.prompt_kb, per_body), args)
        if "ordinary" in parts:
            ordinary = argparse.Namespace(**{**vars(args), "requests": args.ordinary_requests})
            part_overload(tmp, "ordinary", lambda c: make_export_request(2000, seed=c), ordinary)
        if "durability" in parts:
            part_durability(tmp, args)


if __name__ == "__main__":
    main()
