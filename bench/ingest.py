"""Ingest benchmark: N spans over real HTTP to a real `inferledger serve`, pinned to one core.

Prints end-to-end spans/s for protobuf and for JSON, the server's peak RSS, and where the time
goes (decode, DuckDB insert, HTTP + rest) measured in-process on the same payloads.

    .venv/bin/python bench/ingest.py [--spans 300000] [--batch 2000] [--concurrency 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from inferledger.core.storage import Storage  # noqa: E402
from inferledger.fixtures import make_export_request  # noqa: E402
from ingest import otlp_decode  # noqa: E402
from ingest.span_writer import decode_for_storage, insert_spans, merge_decoded  # noqa: E402


def to_json(req) -> bytes:
    from google.protobuf import json_format

    doc = json_format.MessageToDict(req)
    import base64

    for rs in doc["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for sp in ss["spans"]:
                for k in ("traceId", "spanId", "parentSpanId"):
                    sp[k] = base64.b64decode(sp[k]).hex()
    return json.dumps(doc).encode()


def payloads(n_spans: int, batch: int, seed: int, fmt: str) -> list[bytes]:
    out = []
    for b in range(n_spans // batch):
        req = make_export_request(
            batch,
            seed=seed + b,
            id_offset=b * batch,
            start_ns=1_780_000_000_000_000_000 + seed * 10**15,
        )
        out.append(req.SerializeToString() if fmt == "pb" else to_json(req))
    return out


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


COMMITTED_METRICS = ("inferledger_spans_accepted_total ", "inferledger_spans_duplicate_total ")


def committed_spans(url: str) -> float:
    """Spans written to DuckDB so far (stored + found duplicate), from the server's /metrics."""
    total = 0.0
    for line in requests.get(url + "/metrics", timeout=10).text.splitlines():
        if line.startswith(
            ("inferledger_spans_accepted_total ", "inferledger_spans_duplicate_total ")
        ):
            total += float(line.split()[1])
    return total


def wait_committed(url: str, target: float, timeout_s: float = 600) -> None:
    deadline = time.monotonic() + timeout_s
    while committed_spans(url) < target:
        if time.monotonic() > deadline:
            raise SystemExit("spans were acknowledged but not written in time")
        time.sleep(0.02)


def send_all(url: str, bodies: list[bytes], content_type: str, concurrency: int) -> float:
    chunks = [bodies[i::concurrency] for i in range(concurrency)]
    failures: list[str] = []

    def worker(mine: list[bytes]) -> None:
        s = requests.Session()
        for body in mine:
            while True:
                r = s.post(
                    url + "/v1/traces",
                    data=body,
                    headers={"Content-Type": content_type},
                    timeout=120,
                )
                if r.status_code == 503:
                    time.sleep(float(r.headers.get("Retry-After", "1")))
                    continue
                if r.status_code != 200:
                    failures.append(f"{r.status_code} {r.text[:200]}")
                break

    threads = [threading.Thread(target=worker, args=(c,)) for c in chunks]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    if failures:
        raise SystemExit(f"ingest failed: {failures[:3]}")
    return elapsed


def start_server(
    db: Path, port: int, core: int, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """`inferledger serve` on one core, ready; `env` adds settings (INFERLEDGER_...)."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "inferledger.cli",
            "serve",
            "--db",
            str(db),
            "--port",
            str(port),
            "--log-level",
            "warning",
        ],
        cwd=ROOT,
        # One core for the whole server, DuckDB's worker threads included.
        env={
            **{k: v for k, v in os.environ.items() if not k.startswith("INFERLEDGER_")},
            "INFERLEDGER_STORAGE_THREADS": "1",
            # Checkpoint often enough that the run pays for its checkpoints (steady state)
            # instead of leaving them all in the WAL for later.
            "INFERLEDGER_STORAGE_CHECKPOINT_THRESHOLD": "32MB",
            **(env or {}),
        },
        preexec_fn=lambda: os.sched_setaffinity(0, {core}),
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if requests.get(f"http://127.0.0.1:{port}/readyz", timeout=5).ok:
                return proc
        except requests.RequestException:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("server did not become ready")


def breakdown(bodies: list[bytes], tmp: Path) -> dict[str, float]:
    """Per-stage rates on one core, in-process, on the same protobuf payloads."""
    n = sum(decode_for_storage(b).spans.num_rows for b in bodies[:1]) * len(bodies)
    t0 = time.perf_counter()
    decoded = [decode_for_storage(b) for b in bodies]
    t_decode = time.perf_counter() - t0
    per_merge = max(1, 64_000 // decoded[0].spans.num_rows)  # as the span ingestor merges
    merged = [merge_decoded(decoded[i : i + per_merge]) for i in range(0, len(decoded), per_merge)]
    with Storage(tmp / "breakdown.duckdb", threads=1) as st:
        t0 = time.perf_counter()
        for d in merged:
            st.write(lambda cur, d=d: insert_spans(cur, d), units=d.spans.num_rows)
        t_insert = time.perf_counter() - t0
        size = st.size_bytes()
    return {
        "decode_spans_per_s": n / t_decode,
        "insert_spans_per_s": n / t_insert,
        "bytes_per_span_on_disk": size / n,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spans", type=int, default=300_000)
    ap.add_argument("--batch", type=int, default=2_000)
    ap.add_argument("--concurrency", type=int, default=3)
    ap.add_argument("--core", type=int, default=0, help="CPU core the server is pinned to")
    args = ap.parse_args()
    from inferledger.core.net import free_port

    print(
        f"decoder {'C' if otlp_decode.ACCELERATED else 'pure Python'}; "
        f"{args.spans} spans, {args.batch} per request, {args.concurrency} senders; "
        f"server pinned to core {args.core} of {os.cpu_count()}"
    )
    pb = payloads(args.spans, args.batch, 1, "pb")
    js = payloads(args.spans // 4, args.batch, 2, "json")
    print(
        f"payload bytes/span: protobuf {statistics.mean(map(len, pb)) / args.batch:.0f}, "
        f"json {statistics.mean(map(len, js)) / args.batch:.0f}"
    )
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        port = free_port()
        proc = start_server(tmp / "bench.duckdb", port, args.core)
        url = f"http://127.0.0.1:{port}"
        try:
            warm = payloads(10 * args.batch, args.batch, 3, "pb")  # other ids than below
            send_all(url, warm, "application/x-protobuf", args.concurrency)
            done = len(warm) * args.batch
            wait_committed(url, done)
            t0 = time.perf_counter()
            t_pb_ack = send_all(url, pb, "application/x-protobuf", args.concurrency)
            done += args.spans
            wait_committed(url, done)
            t_pb = time.perf_counter() - t0
            t0 = time.perf_counter()
            t_js_ack = send_all(url, js, "application/json", args.concurrency)
            done += len(js) * args.batch
            wait_committed(url, done)
            t_js = time.perf_counter() - t0
            rss = peak_rss_mib(proc.pid)
        finally:
            proc.terminate()
            proc.wait(60)
        n_js = len(js) * args.batch
        print("end to end = first byte sent until the last span is committed to DuckDB")
        print(f"ingest_protobuf_spans_per_s {args.spans / t_pb:,.0f}")
        print(f"ingest_protobuf_ack_spans_per_s {args.spans / t_pb_ack:,.0f}")
        print(f"ingest_json_spans_per_s {n_js / t_js:,.0f}")
        print(f"ingest_json_ack_spans_per_s {n_js / t_js_ack:,.0f}")
        print(f"server_peak_rss_mib {rss:,.0f}")
        os.sched_setaffinity(0, {args.core})
        parts = breakdown(pb[: max(1, len(pb) // 3)], tmp)
        for k, v in parts.items():
            print(f"{k} {v:,.0f}")
        per_span_us = 1e6 * t_pb / args.spans
        dec_us = 1e6 / parts["decode_spans_per_s"]
        ins_us = 1e6 / parts["insert_spans_per_s"]
        print(
            f"time per span: end-to-end {per_span_us:.2f} us = decode {dec_us:.2f} + insert "
            f"{ins_us:.2f} + HTTP/queue/other {per_span_us - dec_us - ins_us:.2f}"
        )


if __name__ == "__main__":
    main()
