"""Cost-ledger benchmark (issue #4): how long the marts take to refresh and the dashboard queries
take to answer on 1M and 10M generated requests.

    .venv/bin/python bench/ledger_data.py --requests 1000000 --db /tmp/bench1m.duckdb
    .venv/bin/python bench/bench_marts.py --db /tmp/bench1m.duckdb

Targets: an hour of 50 req/s traffic refreshes incrementally in under 10 s; every dashboard
query answers in under 300 ms at 10M requests. Steps:

- full refresh: the marts emptied, then `ledger.marts.refresh(storage)` over all the data;
- incremental hour: one more hour of 50 req/s (bench/ledger_data.append_hours; 180,000
  requests) written into the raw tables, then the refresh timed alone;
- queries: every named query the pages run (:func:`page_query_names`, found in the page
  modules' source, not listed by hand), bound as the pages bind them
  (:func:`dashboard_queries`), run once to warm up, then 5 times.

The database is opened as `inferledger serve` opens it (storage.memory_limit 2GB, 2 threads),
and prepared as it prepares it: the price book seeded when empty, replicas learned. The run
writes into it (marts, one more hour per incremental step): keep a copy to start over from.
"""

from __future__ import annotations

import argparse
import ast
import statistics
import sys
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# ROOT first: bench/ingest.py must not shadow the ingest package; bench/ after it, for
# ledger_data.
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
if str(ROOT / "bench") not in sys.path:
    sys.path.append(str(ROOT / "bench"))

from ledger_data import append_hours  # noqa: E402

from inferledger.core.storage import Storage  # noqa: E402
from inferledger.server import prepare_reference_data  # noqa: E402
from inferledger.settings import load_settings  # noqa: E402
from ledger.efficiency import COUNTER_MAX_GAP_S, KV_HIGH_USAGE, MAX_SAMPLE_GAP_S  # noqa: E402
from ledger.marts import Refresher, refresh  # noqa: E402
from ledger.queries import Filters, bind, query_names, query_sql  # noqa: E402

INCREMENTAL_TARGET_S = 10.0
QUERY_TARGET_MS = 300.0
Query = str | tuple[str, dict[str, Any]]


# ---------------------------------------------------------------------------- which queries
def _page_modules() -> list[Path]:
    """app/ and every models or ledger module it imports, directly or through other such modules:
    where a page's named queries are written."""
    files = sorted((ROOT / "app").rglob("*.py"))
    seen: set[Path] = set()
    todo = list(files)
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            for name in names:
                if name.split(".")[0] in ("models", "ledger"):
                    module = ROOT.joinpath(*name.split(".")).with_suffix(".py")
                    if module.is_file():
                        todo.append(module)
    return sorted(seen)


def _names_in(files: Iterable[Path], known: set[str]) -> set[str]:
    """The string constants in `files` that name a query of sql/queries."""
    found = set()
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and node.value in known:
                found.add(node.value)
    return found


def page_query_names() -> list[str]:
    """Every named query a page can run: each sql/queries name written in app/ or in a ledger
    module app/ imports (a literal, so a name a page picks at run time, like the request
    explorer's two orderings, counts too)."""
    return sorted(_names_in(_page_modules(), set(query_names())))


#: Extra bindings timed besides each query's first-load one: (label, query, parameters).
VARIANTS: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("spend_over_time by team/day", "spend_over_time", {"dim": "team", "bucket": "day"}),
    ("economics_by_key by workflow", "economics_by_key", {"dim": "workflow"}),
    ("requests_explorer_newest, page 20", "requests_explorer_newest", {"offset": 1000}),
)


def first_load_params(storage: Storage, filters: Filters) -> dict[str, Any]:
    """A value for every parameter a page query takes besides the filters, as the pages pass
    them on first load; the trace and task pages open the newest trace that has a task."""
    row = storage.fetchall(
        "select trace_id, span_id, task_key from mart_requests "
        "where hour >= ? and hour < ? and task_key is not null order by start_ns desc limit 1",
        [filters.start, filters.end],
    )
    trace_id, span_id, task_key = row[0] if row else ("", "", "")
    window = {"from_ns": 0, "to_ns": 0}
    sql, params = bind("trace_window", filters, trace_id=trace_id)
    found = storage.query_arrow(sql, params).to_pylist()[0]
    if found["calls"]:
        window = {"from_ns": found["from_ns"], "to_ns": found["to_ns"]}
    return {
        "dim": "route",
        "bucket": "hour" if filters.end - filters.start <= timedelta(days=7) else "day",
        "limit": 50,
        "offset": 0,
        "page_size": 50,
        "hosting": None,
        "failed_only": False,
        "model_like": None,
        "min_cost": None,
        "sort": "cost",  # the explorer's other ordering (first load is requests_explorer_newest)
        "descending": True,
        "trace_id": trace_id,
        "span_id": span_id,
        "task_key": task_key,
        "workflow": storage.scalar(
            "select workflow from mart_tasks where workflow is not null "
            "group by 1 order by count(*) desc limit 1"
        ),
        "window_s": 300,  # replica_windows, rightsizing_windows: models/rightsizing.WINDOW_S
        "max_gap_s": MAX_SAMPLE_GAP_S,  # a gauge sample stands for at most this long
        "kv_high": KV_HIGH_USAGE,  # rightsizing_windows: a wait on a full KV cache is held
        "counter_max_gap_s": COUNTER_MAX_GAP_S,  # rightsizing_windows: counter pairs
        **window,
    }


def dashboard_queries(
    storage: Storage, filters: Filters, names: Iterable[str] | None = None
) -> dict[str, tuple[str, dict[str, Any]]]:
    """Each page query (default: :func:`page_query_names`) bound with the filters and
    :func:`first_load_params`, then the :data:`VARIANTS`: label -> (SQL, parameters)."""
    params = first_load_params(storage, filters)
    out = {}
    for name in names if names is not None else page_query_names():
        needed = query_sql(name)[1]
        out[name] = bind(name, filters, **{k: v for k, v in params.items() if k in needed})
    for label, name, extra in VARIANTS:
        needed = query_sql(name)[1]
        given = {k: v for k, v in params.items() if k in needed}
        out[label] = bind(name, filters, **{**given, **extra})
    return out


def load_dashboard_queries(storage: Storage, days: float = 7.0) -> dict[str, Query]:
    """The pages' queries over the last `days` days of the data (its newest hour)."""
    newest = storage.scalar("select max(hour) from mart_spend_hourly")
    if newest is None:
        raise SystemExit("the marts are empty: run the full step first")
    filters = Filters.last(days, now=newest)
    return dict(dashboard_queries(storage, filters))


@contextmanager
def opened(db: str | Path | Storage) -> Iterator[Storage]:
    """The given Storage, or the file opened (and closed after) as the server opens it."""
    if isinstance(db, Storage):
        yield db
        return
    if not Path(db).exists():
        raise FileNotFoundError(f"{db} does not exist: generate it with bench/ledger_data.py")
    with Storage(db, read_timeout_s=600, memory_limit="2GB", threads=2) as storage:
        prepare(storage)
        yield storage


def prepare(storage: Storage) -> None:
    """What `inferledger serve` does before the refresher runs (price book, deployments)."""
    prepare_reference_data(storage, load_settings(env={}))


def _mart_tables(storage: Storage) -> list[str]:
    rows = storage.fetchall(
        "select table_name from information_schema.tables "
        "where table_schema = 'main' and table_type = 'BASE TABLE' "
        "and table_name like 'mart\\_%' escape '\\' and table_name <> 'mart_refresh_log' "
        "order by table_name"
    )
    return [r[0] for r in rows]


def _empty_marts(storage: Storage) -> None:
    from inferledger.core.storage import quote_ident

    tables = _mart_tables(storage)

    def clear(cur: Any) -> None:
        for name in tables:
            cur.execute(f"delete from {quote_ident(name)}")

    storage.write(clear)


def time_full_refresh(db: str | Path | Storage) -> float:
    """Seconds of one refresh from empty marts over everything in the raw tables."""
    with opened(db) as storage:
        _empty_marts(storage)
        started = time.perf_counter()
        result = refresh(storage, full=True)
        seconds = time.perf_counter() - started
    print(f"full refresh: {seconds:.1f} s  ({result})")
    return seconds


def time_incremental_hour(db: str | Path | Storage, rate_per_s: float = 50.0) -> float:
    """Seconds of the refresh after one more hour of `rate_per_s` traffic arrived (the marts
    are brought up to date first, untimed, if they were never refreshed)."""
    with opened(db) as storage:
        refresh = Refresher(storage).refresh
        caught_up = refresh()  # untimed: brings the marts (and the refresher's state) up to date
        print(f"  catch-up refresh before the new hour: {caught_up}")
        added = append_hours(storage, hours=1, rate_per_s=rate_per_s)
        print(
            f"  appended {added.requests:,} requests ({added.spans:,} spans, "
            f"{added.samples:,} samples) for {added.start:%Y-%m-%d %H:%M} UTC "
            f"in {added.seconds:.1f} s"
        )
        started = time.perf_counter()
        result = refresh()
        seconds = time.perf_counter() - started
    verdict = (
        "ok" if seconds < INCREMENTAL_TARGET_S else f"OVER the {INCREMENTAL_TARGET_S:g} s target"
    )
    print(
        f"incremental refresh of one hour at {rate_per_s:g} req/s: {seconds:.2f} s, {verdict}"
        f"  ({result})"
    )
    return seconds


@dataclass(frozen=True)
class QueryTiming:
    name: str
    p50_ms: float
    max_ms: float
    rows: int


def time_queries(
    db: str | Path | Storage, queries: dict[str, Query], runs: int = 5
) -> list[QueryTiming]:
    """Each query (SQL, or (SQL, parameters)) run once to warm up, then `runs` times; prints
    p50 and max milliseconds, fetched to Arrow as the dashboards fetch them."""
    timings = []
    with opened(db) as storage:
        for name, query in queries.items():
            sql, params = (query, None) if isinstance(query, str) else query
            table = storage.query_arrow(sql, params)
            times = []
            for _ in range(runs):
                started = time.perf_counter()
                storage.query_arrow(sql, params)
                times.append((time.perf_counter() - started) * 1000)
            timing = QueryTiming(name, statistics.median(times), max(times), table.num_rows)
            timings.append(timing)
            flag = "" if timing.max_ms < QUERY_TARGET_MS else f"  OVER {QUERY_TARGET_MS:g} ms"
            print(
                f"  {name:<40} p50 {timing.p50_ms:8.1f} ms  max {timing.max_ms:8.1f} ms  "
                f"{timing.rows:>8,} rows{flag}"
            )
    return timings


def raw_volumes(db: str | Path | Storage) -> str:
    with opened(db) as storage:
        spans, requests, first, last = storage.fetchall(
            "select count(*), count(*) filter (where parent_span_id is null), "
            "min(start_ns), max(start_ns) from spans"
        )[0]
        samples = storage.scalar("select count(*) from metric_samples")
        size = storage.size_bytes()
    hours = (last - first) / 3.6e12 if first is not None else 0
    return (
        f"{requests:,} requests, {spans:,} spans, {samples:,} samples over {hours:.1f} h; "
        f"{size / 2**30:.2f} GiB"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--db", required=True, help="a database made by bench/ledger_data.py")
    parser.add_argument(
        "--steps",
        default="full,incremental,queries",
        help="comma-separated: full, incremental, queries (default all, in that order)",
    )
    parser.add_argument("--rate", type=float, default=50.0, help="incremental hour's req/s")
    args = parser.parse_args(argv)

    steps = [s.strip() for s in args.steps.split(",") if s.strip()]
    unknown = set(steps) - {"full", "incremental", "queries"}
    if unknown:
        parser.error(f"unknown steps: {', '.join(sorted(unknown))}")
    print(f"{args.db}: {raw_volumes(args.db)}")
    for step in steps:
        if step == "full":
            time_full_refresh(args.db)
        elif step == "incremental":
            time_incremental_hour(args.db, args.rate)
        else:
            print("dashboard queries (the last 7 days of the data):")
            with opened(args.db) as storage:
                queries = load_dashboard_queries(storage)
            time_queries(args.db, queries)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
