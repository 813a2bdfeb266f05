"""View catalog benchmark (issue #14): every example query of the catalog (sql/catalog.yaml),
the catalog itself (DESCRIBE of every view: the Views page and GET /api/v1/views) and the read
API's first page of every view, p50/p95 over N runs on a generated ledger.

    .venv/bin/python bench/ledger_data.py --requests 1000000 --db /tmp/bench1m.duckdb
    .venv/bin/python bench/bench_marts.py --db /tmp/bench1m.duckdb --steps full
    .venv/bin/python bench/catalog_queries.py --db /tmp/bench1m.duckdb --runs 10

Target: every example query's p95 <= 1 s on the 10M-request ledger.

The examples speak of "the last 7 days" as ``now() - interval 7 day`` and ``current_date``;
generated data lies in the past (2026-03 onwards), so here ``now()`` and ``current_date``
are replaced by the instant and the UTC day of the data's last request (the text is
otherwise run as written), so each query reads the windows it would read on a live ledger.
The database is opened as ``inferledger serve`` opens it (2 GB, 2 threads) and only read.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from inferledger.core.storage import Storage, compile_statement, quote_ident  # noqa: E402
from ledger.catalog import (  # noqa: E402
    ViewDoc,
    catalog_json,
    load_catalog,
    page_statement,
    view_columns,
)

TARGET_S = 1.0
_NOW = re.compile(r"\bnow\(\)")
_TODAY = re.compile(r"\bcurrent_date\b")


def as_of(sql: str, end: datetime) -> str:
    """The example's text with now() and current_date pinned to `end` (literals we format
    from a datetime, never from input)."""
    sql = _NOW.sub(f"timestamptz '{end.isoformat()}'", sql)
    return _TODAY.sub(f"date '{end.date().isoformat()}'", sql)


def timed(fn: Callable[[], Any], runs: int) -> tuple[float, float, int]:
    """(p50 s, p95 s, rows of the last run) over `runs` runs after one warm-up."""
    rows = _rows(fn())
    seconds = []
    for _ in range(runs):
        t0 = time.perf_counter()
        rows = _rows(fn())
        seconds.append(time.perf_counter() - t0)
    seconds.sort()
    p95 = seconds[min(len(seconds) - 1, round(0.95 * (len(seconds) - 1)))]
    return statistics.median(seconds), p95, rows


def _rows(result: Any) -> int:
    return getattr(result, "num_rows", None) or (len(result) if result is not None else 0)


def data_end(storage: Storage) -> datetime:
    end = storage.scalar("select max(start_time) from request_costs")
    if end is None:
        raise SystemExit(
            "request_costs is empty: refresh the marts first (bench_marts --steps full)"
        )
    return end.astimezone(UTC)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--db", required=True, help="a ledger from bench/ledger_data.py, refreshed")
    parser.add_argument("--runs", type=int, default=10, help="timed runs per query (10)")
    parser.add_argument("--page-limit", type=int, default=1000, help="API page size (1000)")
    parser.add_argument("--views", default="", help="comma-separated views (default: all)")
    parser.add_argument(
        "--check-keys",
        action="store_true",
        help="also check that each view's order_by is unique per row (what keyset paging needs)",
    )
    args = parser.parse_args(argv)
    if not Path(args.db).exists():
        parser.error(f"{args.db} does not exist: generate it with bench/ledger_data.py")
    chosen = [v.strip() for v in args.views.split(",") if v.strip()]
    docs = [load_catalog().view(v) for v in chosen] or list(load_catalog().views)

    with Storage(args.db, read_timeout_s=600, memory_limit="2GB", threads=2) as storage:
        end = data_end(storage)
        requests = storage.scalar("select count(*) from request_costs")
        print(f"{args.db}: {requests:,} requests up to {end:%Y-%m-%d %H:%M} UTC; {args.runs} runs")
        worst = 0.0
        print(f"{'example query':<62} {'p50':>9} {'p95':>9} {'rows':>7}")
        for doc in docs:
            for i, example in enumerate(doc.examples):
                sql = as_of(example.sql, end)
                p50, p95, rows = timed(lambda sql=sql: storage.query_arrow(sql), args.runs)
                worst = max(worst, p95)
                label = f"{doc.name}[{i}] {example.title}"[:62]
                print(f"{label:<62} {p50 * 1e3:7.1f}ms {p95 * 1e3:7.1f}ms {rows:>7,}")
        verdict = "meets" if worst <= TARGET_S else "MISSES"
        print(f"worst example p95: {worst * 1e3:.1f} ms ({verdict} the {TARGET_S:g} s target)")

        p50, p95, _ = timed(lambda: catalog_json(storage), args.runs)
        print(f"catalog (DESCRIBE every view, /api/v1/views): p50 {p50 * 1e3:.1f} ms, "
              f"p95 {p95 * 1e3:.1f} ms")  # fmt: skip

        print(f"API first page, limit {args.page_limit}, the data's last day where timed:")
        start = end - timedelta(days=1)
        for doc in docs:
            types = {c.name: c.type for c in view_columns(storage, doc.name)}
            stmt = page_statement(
                doc,
                types.get(doc.time_column or ""),
                start=start if doc.time_column else None,
                end=end + timedelta(hours=1) if doc.time_column else None,
                limit=args.page_limit + 1,
            )
            sql, params = compile_statement(stmt)
            p50, p95, rows = timed(lambda s=sql, p=params: storage.query_arrow(s, p), args.runs)
            print(f"  {doc.name:<30} p50 {p50 * 1e3:7.1f} ms  p95 {p95 * 1e3:7.1f} ms  {rows:>6,}")
        duplicated = check_keys(storage, docs) if args.check_keys else []
    return 0 if worst <= TARGET_S and not duplicated else 1


def check_keys(storage: Storage, docs: list[ViewDoc]) -> list[str]:
    """Views whose order_by repeats on some rows (NULLs equal, as GROUP BY has them)."""
    bad = []
    print("order_by unique per row:")
    for doc in docs:
        keys = ", ".join(quote_ident(c) for c in doc.order_by)
        t0 = time.perf_counter()
        repeated = storage.scalar(
            f"select count(*) from (select {keys} from {quote_ident(doc.name)}"
            " group by all having count(*) > 1)"
        )
        took = time.perf_counter() - t0
        print(f"  {doc.name:<30} {'ok' if not repeated else f'{repeated:,} keys repeat'}"
              f" ({took:.1f} s)")  # fmt: skip
        if repeated:
            bad.append(doc.name)
    return bad


if __name__ == "__main__":
    raise SystemExit(main())
