"""Detection latency of alerts (issue #12: <= 2 min at p95 from the data arriving to the
notification leaving), measured end to end on a real `inferledger serve`.

The server runs with an ``unpriced_usage`` rule grouped by model (threshold 1 request, no
pending period) and a webhook channel pointing at a receiver on loopback. Each trial waits a
random time, then sends real OTLP/HTTP spans (protobuf) of calls to a model that has no price
and was never seen before, so exactly one new alert fires per trial. Latency = the receiver's
clock at the notification - the clock when the spans were sent (one machine, one clock).

Data reaches an alert through: the ledger refresh (every ``ledger.refresh_interval_s``, 60 s
by default), then the evaluation that runs right after each refresh, then the dispatcher
(every 2 s and right after each evaluation). So the expected latency is about half a refresh
interval on average and one refresh interval plus the refresh and the evaluation at worst:
the refresh interval dominates.

    .venv/bin/python bench/detection_latency.py                     # 20 trials, defaults
    .venv/bin/python bench/detection_latency.py --trials 30 --refresh-s 15 --interval-s 15
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from inferledger.core.storage import Storage  # noqa: E402
from inferledger.ledger_fixtures import S, SpanSet, watch_unpriced  # noqa: E402


class Receiver:
    def __init__(self) -> None:
        self.arrivals: dict[str, float] = {}  # model -> first arrival (time.time())
        self.cond = threading.Condition()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                now = time.time()
                model = (body.get("scope") or {}).get("model")
                with outer.cond:
                    if body.get("event") == "firing" and model:
                        outer.arrivals.setdefault(model, now)
                    outer.cond.notify_all()
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def wait_for(self, model: str, timeout_s: float) -> float | None:
        with self.cond:
            self.cond.wait_for(lambda: model in self.arrivals, timeout_s)
            return self.arrivals.get(model)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spans_for(model: str, trial: int) -> bytes:
    """Three calls to `model` (no price) that ended a moment ago; trace and span ids unique
    per trial (the receiver drops a span it already has)."""
    now = datetime.now(UTC)
    spans = SpanSet(int(now.timestamp() * S) - 3 * S, _ids=itertools.count(trial * 1000 + 1))
    for i in range(3):
        trace = spans.new_trace()
        root = spans.root(trace, i * 0.5, i * 0.5 + 1, app="chat", route="/ask", team="search")
        spans.llm_call(
            trace,
            root,
            i * 0.5 + 0.1,
            i * 0.5 + 0.9,
            model=model,
            provider="mystery",
            input_tokens=100,
            output_tokens=20,
        )
    return spans.payload()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--refresh-s", type=int, default=60, help="ledger.refresh_interval_s")
    parser.add_argument("--interval-s", type=int, default=60, help="alerts.interval_s")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    receiver = Receiver()
    with tempfile.TemporaryDirectory(prefix="detection-") as tmp_dir:
        db = Path(tmp_dir) / "ledger.duckdb"
        with Storage(db).open() as st:
            watch_unpriced(st, receiver.url, by="bench", name="new unpriced model")
        port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("INFERLEDGER_")}
        env["INFERLEDGER_LEDGER_REFRESH_INTERVAL_S"] = str(args.refresh_s)
        env["INFERLEDGER_ALERTS_INTERVAL_S"] = str(args.interval_s)
        log = open(Path(tmp_dir) / "serve.log", "wb")  # noqa: SIM115 - closed below
        server = subprocess.Popen(
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
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=ROOT,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                try:
                    if requests.get(url + "/readyz", timeout=1).status_code == 200:
                        break
                except (requests.ConnectionError, requests.Timeout):
                    time.sleep(0.2)
            else:
                raise SystemExit("server did not start")
            latencies = []
            for trial in range(args.trials):
                time.sleep(rng.uniform(0, args.refresh_s))
                model = f"mystery-{trial}"
                body = spans_for(model, trial)
                sent = time.time()
                resp = requests.post(
                    url + "/v1/traces",
                    data=body,
                    timeout=30,
                    headers={"Content-Type": "application/x-protobuf"},
                )
                resp.raise_for_status()
                arrived = receiver.wait_for(model, 10 * max(args.refresh_s, args.interval_s))
                if arrived is None:
                    print(f"trial {trial}: no notification", flush=True)
                    print((Path(tmp_dir) / "serve.log").read_text()[-4000:])
                    continue
                latencies.append(arrived - sent)
                print(f"trial {trial}: {arrived - sent:.1f} s", flush=True)
        finally:
            server.terminate()
            server.wait(60)
            log.close()
    if not latencies:
        print("no notification arrived")
        return 1
    lat = np.array(latencies)
    print(
        f"detection latency over {len(lat)} of {args.trials} trials (refresh every "
        f"{args.refresh_s} s, evaluation every {args.interval_s} s): p50 "
        f"{np.percentile(lat, 50):.1f} s, p95 {np.percentile(lat, 95):.1f} s, max {lat.max():.1f} s"
    )
    return 0 if len(lat) == args.trials else 1


if __name__ == "__main__":
    sys.exit(main())
