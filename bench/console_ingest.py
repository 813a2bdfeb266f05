"""Does the SQL console slow ingest down? Protobuf spans over real HTTP to a real `inferledger
serve` (pinned to one core, as bench/ingest.py), alone and while four clients keep heavy console
queries running through the SQL page's own callback (POST /_dash-update-component, the Run
button), phases alternated to even out the machine's noise.

The console's workers are children of the server and inherit its one-core affinity: they
compete with ingest for the same core (the worst case), held back only by their lower priority
(nice 19) and threads=1.

    .venv/bin/python bench/console_ingest.py [--spans 200000] [--rounds 2] [--core 0]
"""

from __future__ import annotations

import argparse
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

from inferledger.core.net import free_port  # noqa: E402


def _bench_ingest():
    """bench/ingest.py's helpers (its module name would shadow the ingest package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_ingest", ROOT / "bench" / "ingest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_INGEST = _bench_ingest()
committed_spans, payloads = _INGEST.committed_spans, _INGEST.payloads
send_all, wait_committed = _INGEST.send_all, _INGEST.wait_committed

#: Heavy queries: CPU-bound cross joins and sorts that run into the console's time limit.
HEAVY = (
    "select sum(a.range * b.range) from range(100000) a, range(100000) b",
    "select count(distinct (a.range * 7919) % 1000003) from range(30000) a, range(3000) b",
    "select * from range(20000000) order by random() limit 5",
    "select sum(hash(a.range, b.range)) from range(50000) a, range(50000) b",
)
#: The SQL page's Run callback (app/pages/sql.py `_run`): its outputs, as Dash names them.
RUN_OUTPUTS = [
    ("sql-grid", "rowData"),
    ("sql-grid", "columnDefs"),
    ("sql-message", "children"),
    ("sql-message", "className"),
    ("sql-x", "options"),
    ("sql-y", "options"),
    ("sql-x", "value"),
    ("sql-y", "value"),
    ("sql-last-sql", "data"),
    ("sql-history-tick", "data"),
]


def rejected_spans(url: str) -> float:
    text = requests.get(url + "/metrics", timeout=10).text
    return sum(
        float(line.split()[1])
        for line in text.splitlines()
        if line.startswith("inferledger_spans_rejected_total")
    )


def run_body(sql: str, clicks: int) -> dict:
    return {
        "output": ".." + "...".join(f"{i}.{p}" for i, p in RUN_OUTPUTS) + "..",
        "outputs": [{"id": i, "property": p} for i, p in RUN_OUTPUTS],
        "inputs": [{"id": "sql-run", "property": "n_clicks", "value": clicks}],
        "changedPropIds": ["sql-run.n_clicks"],
        "state": [
            {"id": "sql-editor", "property": "value", "value": sql},
            {"id": "sql-history-tick", "property": "data", "value": clicks},
        ],
    }


def console_query(session: requests.Session, url: str, sql: str, clicks: int) -> str:
    """Run `sql` as the page's Run button does; returns the message line shown."""
    r = session.post(url + "/_dash-update-component", json=run_body(sql, clicks), timeout=120)
    r.raise_for_status()
    return str(r.json()["response"]["sql-message"]["children"])


def start_server(db: Path, port: int, core: int, timeout_s: float) -> subprocess.Popen[bytes]:
    """bench/ingest.py's server, sign-in off and the console's limits set."""
    console = {
        "INFERLEDGER_AUTH_ENABLED": "false",
        "INFERLEDGER_CONSOLE_TIMEOUT_S": str(timeout_s),
        "INFERLEDGER_CONSOLE_WORKERS": "2",
    }
    return _INGEST.start_server(db, port, core, console)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spans", type=int, default=200_000, help="spans per phase")
    ap.add_argument("--batch", type=int, default=2_000)
    ap.add_argument("--rounds", type=int, default=2, help="alone/with-console pairs")
    ap.add_argument("--core", type=int, default=0)
    ap.add_argument("--timeout-s", type=float, default=10.0, help="console.timeout_s")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        proc = start_server(Path(tmp) / "bench.duckdb", port, args.core, args.timeout_s)
        try:
            session = requests.Session()
            # warm up: the snapshot is built and both workers started before measuring
            print("warm-up:", console_query(session, url, "select 1", 1), flush=True)
            alone: list[float] = []
            loaded: list[float] = []
            outcomes: list[str] = []
            seed = 0
            for _ in range(args.rounds):
                for with_console in (False, True):
                    seed += 1
                    bodies = payloads(args.spans, args.batch, seed, "pb")
                    stop = threading.Event()
                    clients = []
                    if with_console:

                        def client(i: int, stop: threading.Event = stop) -> None:
                            s = requests.Session()
                            n = 0
                            while not stop.is_set():
                                n += 1
                                outcomes.append(console_query(s, url, HEAVY[i], 100 + n))

                        clients = [threading.Thread(target=client, args=(i,)) for i in range(4)]
                        for c in clients:
                            c.start()
                        time.sleep(1.0)  # the queries are running
                    before = committed_spans(url)
                    t0 = time.perf_counter()
                    send_all(url, bodies, "application/x-protobuf", 3)
                    wait_committed(url, before + len(bodies) * args.batch)
                    rate = len(bodies) * args.batch / (time.perf_counter() - t0)
                    if rejected_spans(url):
                        raise SystemExit("the server rejected spans: the figures would be wrong")
                    stop.set()
                    for c in clients:
                        c.join()
                    (loaded if with_console else alone).append(rate)
                    label = "with 4 heavy console queries" if with_console else "alone"
                    print(f"{label:30} {rate:10,.0f} spans/s", flush=True)
            ratios = [w / a for a, w in zip(alone, loaded, strict=True)]
            print(
                "per round, with console / alone: "
                + ", ".join(f"{r:.2f}" for r in ratios)
                + f"; median {statistics.median(ratios):.2f}"
            )
            a, b = statistics.median(alone), statistics.median(loaded)
            print(f"median alone {a:,.0f} spans/s; with console {b:,.0f} spans/s; "
                  f"drop {100 * (1 - b / a):.1f} %")  # fmt: skip
            kinds = statistics.multimode(o.split(":")[0] for o in outcomes) if outcomes else []
            print(f"console answers: {len(outcomes)} (most often: {kinds})")
        finally:
            proc.terminate()
            proc.wait(30)


if __name__ == "__main__":
    main()
