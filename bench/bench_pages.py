"""Page-ready time of every dashboard page, measured in headless Chromium (issue #5).

    .venv/bin/python bench/bench_pages.py --db /tmp/bench10m.duckdb --runs 7

Starts `inferledger serve` in this process on a copy-free read of the database (the server
opens it as usual; the refresher finds nothing to do on a refreshed ledger), opens each page
`--runs` times after one warm-up, and prints p50/p95 of the time from navigation to every chart
drawn, and the slowest Dash callback each page made (browser-observed over loopback).
Target: every page ready in under 1.5 s p95, every callback under 300 ms.

The range is the last 7 days of the data (the benchmark data is not "now"), passed in the URL.
Sign-in is switched off for the run (auth.enabled=false) so only the pages are timed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import flask  # noqa: E402

from inferledger.browser_pages import PAGES, chromium, time_page  # noqa: E402
from inferledger.server import serve_in_thread  # noqa: E402
from inferledger.settings import load_settings  # noqa: E402

READY_TARGET_MS = 1500.0
CALLBACK_TARGET_MS = 300.0


def free_port() -> int:
    from inferledger.core.net import free_port as pick

    return pick()


def _time_callbacks(server: flask.Flask, timings: list[tuple[str, float]]) -> None:
    """Record into `timings` the server time of every Dash callback (output ids, ms)."""

    @server.before_request
    def _start() -> None:
        flask.g.bench_started = time.perf_counter()

    @server.after_request
    def _stop(response: flask.Response) -> flask.Response:
        if flask.request.path.endswith("/_dash-update-component"):
            output = (flask.request.get_json(silent=True) or {}).get("output", "?")
            timings.append((output, (time.perf_counter() - flask.g.bench_started) * 1000))
        return response


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--db", required=True)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args(argv)

    port = free_port()
    overrides = {"db": args.db, "port": port, "log_level": "warning"}
    settings = load_settings(env={}).replace(auth__enabled=False, **overrides)
    callback_ms: list[tuple[str, float]] = []
    service, thread, url = serve_in_thread(
        settings, lambda svc: _time_callbacks(svc.dash_app.server, callback_ms)
    )
    newest = service.storage.scalar("select max(hour) from mart_spend_hourly")
    if newest is None:
        print("the ledger is empty: run `inferledger refresh --db ...` first")
        return 1
    end = newest + timedelta(hours=1)
    query = f"?range=custom&start={(end - timedelta(days=7)).date()}&end={end.date()}"
    trace = service.storage.scalar(
        "select trace_id from mart_requests where hour = $h limit 1", {"h": newest}
    )
    pages = [*PAGES, ("trace", f"/trace/{trace}")]
    print(f"{args.db}: {service.storage.scalar('select count(*) from mart_requests'):,} requests")
    worst = 0
    with chromium() as page:
        for name, path in pages:
            time_page(page, url + path + query, name)  # warm-up
            callback_ms.clear()
            runs = [time_page(page, url + path + query, name) for _ in range(args.runs)]
            ready = sorted(r.ready_ms for r in runs)
            p95 = ready[min(len(ready) - 1, round(0.95 * (len(ready) - 1)))]
            slowest_output, slowest = max(callback_ms, key=lambda t: t[1], default=("", 0.0))
            flags = []
            if p95 > READY_TARGET_MS:
                flags.append(f"ready OVER {READY_TARGET_MS:g} ms")
            if slowest > CALLBACK_TARGET_MS:
                flags.append(f"callback OVER {CALLBACK_TARGET_MS:g} ms")
            worst += bool(flags)
            print(
                f"  {name:<10} ready p50 {statistics.median(ready):7.0f} ms  p95 {p95:7.0f} ms"
                f"  callbacks {len(callback_ms) // args.runs:>3}  slowest {slowest:6.0f} ms"
                f" ({slowest_output[:40]})  {'  '.join(flags)}"
            )
    service.request_stop()
    thread.join(30)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
