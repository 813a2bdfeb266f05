"""What the SQL console's safety costs per query: the same statements through the console (a
sandbox worker process over the snapshot: parse check, locked-down connection, Arrow IPC back
over a pipe) and directly on the storage gateway's reader cursor, in one process.

    .venv/bin/python bench/console_overhead.py [--runs 200]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from inferledger.core.storage import Storage  # noqa: E402
from inferledger.ledger_fixtures import worked_example  # noqa: E402
from ledger.console import Console  # noqa: E402
from ledger.marts import Refresher  # noqa: E402

QUERIES = {
    "trivial": "select 1 as one",
    "view, 100 rows": "select * from spend_hourly limit 100",
    "1,000 generated rows": "select range as i, 'row ' || range as s from range(1000)",
}


def timed(fn, runs: int) -> tuple[float, float]:
    """Median and p95 of `runs` calls, ms."""
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1000)
    out.sort()
    return statistics.median(out), out[int(0.95 * (len(out) - 1))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=200)
    args = ap.parse_args()
    base_ns = int(datetime(2026, 3, 2, 10, tzinfo=UTC).timestamp()) * 1_000_000_000
    with tempfile.TemporaryDirectory() as tmp, Storage(Path(tmp) / "b.duckdb") as storage:
        worked_example(storage, base_ns)
        Refresher(storage).refresh(full=True)
        console = Console(storage, Path(tmp) / "snap.duckdb", workers=1)
        try:
            t0 = time.perf_counter()
            first = console.run("select 1")
            assert first.ok, first.reason
            print(f"first query (snapshot build + worker start): {time.perf_counter() - t0:.2f} s")
            print(f"{'query':24} {'direct ms':>16} {'console ms':>16} {'overhead ms':>12}")
            for label, sql in QUERIES.items():
                direct = timed(lambda sql=sql: storage.query_arrow(sql), args.runs)
                via = timed(lambda sql=sql: console.run(sql), args.runs)
                print(
                    f"{label:24} {direct[0]:7.2f} (p95 {direct[1]:5.2f}) "
                    f"{via[0]:7.2f} (p95 {via[1]:5.2f}) {via[0] - direct[0]:12.2f}"
                )
        finally:
            console.close()


if __name__ == "__main__":
    main()
