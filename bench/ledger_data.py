"""Benchmark data for the cost ledger (issue #4): N LLM requests of a demo-like fleet, generated
in bulk by DuckDB straight into the raw tables (spans, scrapes, metric_samples).

    .venv/bin/python bench/ledger_data.py --requests 1000000 --db /tmp/bench1m.duckdb

Rows look like what the real ingest path stores for the demo (docs/demo.md): per request one
trace with a SERVER root span `POST /<route>` (inferledger.* attributes, the outcome on the
task's final attempt), a CLIENT `chat <model>` span (gen_ai.* usage, task id, attempt,
fallback) and vLLM's SERVER `llm_request` span parented on it (latency set, replica as
service.instance.id); ~60 % have a retrieval span, ~15 % a tool span; ~3 % are second
attempts of a failed first one, a third of those a hosted `chat gpt-4.1-mini` fallback with
no engine span. Each vLLM replica is scraped every 15 s (counters consistent with the engine
spans that finished in each interval; gauges from the same spans), one dcgm-exporter target
per deployment. tests/test_bench_data.py checks the rows against the real OTLP decoder and
Prometheus parser.

Why SQL and not the simulator: the simulator makes a day of demo traffic in ~13 s and ingest
stores ~100k spans/s, so 10M requests (~37M spans) would take hours; here every value is a
function of (seed, hour, request index) computed by DuckDB's vectorized hash(), one
INSERT ... SELECT per span kind per chunk of about a million requests. Latencies are drawn,
not simulated: consistent with each other (ttft = queue + prefill, e2e = ttft + decode,
parents enclose children), overlapping on replicas so batches form, but not a queueing model.

Measured on the shared 2-core development machine (2026-11-30): 1M requests (3.75M spans,
9 h of traffic) in 24-35 s, 333 MiB; 10M requests (37.5M spans, 59 h, 142k scrapes, 1.7M
samples) in 5 min 27 s wall, 3.2 GiB (spans ~81 bytes each); peak RSS 2.2 GiB either way.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import shutil
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

if str(ROOT / "bench") not in sys.path:
    sys.path.append(str(ROOT / "bench"))

from ledger_data_fleet import (  # noqa: E402
    APP_RESOURCE_KEYS,
    CACHE_CONFIG_LABELS,
    DEPLOYMENTS,
    ENGINE_RESOURCE_KEYS,
    FINISHED_REASONS,
    ROUTES,
)
from ledger_data_sql import (  # noqa: E402
    APP_SPAN,
    BASE,
    BUCKETS,
    CLIENT_SPANS,
    DCGM_SCRAPES,
    ENGINE_SPANS,
    GRID,
    MACROS,
    REQUESTS,
    RETRIEVAL_SPANS,
    RETRY_STARTS,
    ROOT_SPANS,
    SAMPLES,
    TOOL_SPANS,
    VLLM_SCRAPES,
)

from inferledger.core.storage import Storage, Transaction  # noqa: E402

DEFAULT_START = datetime(2026, 3, 2, tzinfo=UTC)  # a Monday, after the seed prices (2026-01-01)
SCRAPE_S = 15
HOUR_NS = 3_600_000_000_000
PAIR_P = 0.06  # even request slots whose attempt fails and is retried in the next slot: 3 %
FALLBACK_P = 1 / 3  # retries that go to the hosted model: 1 % of requests
SCRAPE_FAIL_P = 0.0005  # failed scrapes (up = false), ~6 per target in 55 h
ENV = "prod"
HOSTED_MODEL = "gpt-4.1-mini"
HOSTED_RESPONSE_MODEL = "gpt-4.1-mini-2025-04-14"
GPU_MODEL_NAME = "NVIDIA H200"

# Connection-local scratch tables of the writer cursor, dropped when a fill ends.
TEMP_TABLES = (
    "bench_req", "bench_hours", "bench_routes", "bench_deployments", "bench_replicas",
    "bench_vllm_series", "bench_dcgm_series", "bench_buckets", "bench_grid", "bench_dcgm",
    "bench_base",
)  # fmt: skip


@dataclass(frozen=True)
class Hour:
    """One hour of traffic: its start, how many requests arrive in it, its load factor."""

    start_ns: int
    requests: int
    factor: float


@dataclass(frozen=True)
class Generated:
    """What one generate() or append_hours() call wrote."""

    requests: int
    spans: int
    scrapes: int
    samples: int
    start: datetime
    end: datetime
    seconds: float


def split_replicas(replicas: int) -> tuple[int, int]:
    """Replicas of (8B, 70B): a quarter (at least one) serve the 70B model."""
    if replicas < 2:
        raise ValueError("replicas must be at least 2 (one per deployment)")
    big = max(1, replicas // 4)
    return replicas - big, big


def replica_names(replicas: int) -> list[str]:
    small, big = split_replicas(replicas)
    return [f"vllm-llama-8b-{k}" for k in range(small)] + [
        f"vllm-llama-70b-{k}" for k in range(big)
    ]


# The weekly pattern (issue #12's forecast back-test): weekdays busier than weekends, the
# factors by UTC weekday (Monday first) scaled to a mean of 1 over the week.
WEEKDAY_FACTORS = (1.12, 1.15, 1.15, 1.12, 1.05, 0.55, 0.45)
DAY_NOISE = 0.08  # each day's level: x(1 +- 8 %), uniform
WEEKLY_TREND = 0.015  # +1.5 % a week, compounding hourly


def plan_hours(
    requests: int,
    rate_per_s: float,
    start: datetime,
    seed: int,
    diurnal: bool = True,
    *,
    weekly: bool = False,
    max_hours: int | None = None,
) -> list[Hour]:
    """Hours from `start` until `requests` have arrived (or `max_hours` hours have passed). With
    `diurnal`, the hourly rate follows the day (x0.5 at 03:00 UTC to x1.5 at 15:00) with +-10 %
    hour-to-hour noise, mean `rate_per_s`; the last hour holds the remainder. With `weekly`,
    also the weekday (:data:`WEEKDAY_FACTORS`), a day-to-day level noise (:data:`DAY_NOISE`)
    and a mild trend (:data:`WEEKLY_TREND`), drawn from their own generator so the diurnal
    draws stay what they were."""
    if requests < 1 or rate_per_s <= 0:
        raise ValueError("requests and rate_per_s must be positive")
    if start.utcoffset() is None or start.minute or start.second or start.microsecond:
        raise ValueError("start must be a timezone-aware whole hour")
    rng = random.Random(seed)
    day_rng = random.Random(seed * 7919 + 17)
    day_levels: dict[int, float] = {}
    week_mean = sum(WEEKDAY_FACTORS) / 7
    hours: list[Hour] = []
    start_ns = int(start.timestamp()) * 1_000_000_000
    left = requests
    while left > 0 and (max_hours is None or len(hours) < max_hours):
        moment = start + timedelta(hours=len(hours))
        factor = 1.0
        if diurnal:
            shape = 1 + 0.5 * math.sin(2 * math.pi * (moment.hour - 9) / 24)
            factor = shape * (0.9 + 0.2 * rng.random())
        if weekly:
            day = len(hours) // 24
            if day not in day_levels:
                day_levels[day] = 1 + DAY_NOISE * (2 * day_rng.random() - 1)
            trend = (1 + WEEKLY_TREND) ** (len(hours) / 168)
            factor *= WEEKDAY_FACTORS[moment.weekday()] / week_mean * day_levels[day] * trend
        n = min(left, max(1, round(rate_per_s * 3600 * factor)))
        hours.append(Hour(start_ns + len(hours) * HOUR_NS, n, factor))
        left -= n
    return hours


def series_key(labels: dict[str, str]) -> str:
    """The scraper's series key: labels sorted by name, `name="value"`, comma-joined."""
    return ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))


def _vllm_series(fleet_deployments: list[dict[str, Any]]) -> pa.Table:
    """The vLLM samples of one scrape, per deployment: (metric, family, type, labels, what)."""
    rows: list[dict[str, Any]] = []
    for d in fleet_deployments:
        base = {"engine": "0", "model_name": d["model"]}
        defs: list[tuple[str, str, str, dict[str, str], str]] = [
            ("vllm:num_requests_running", "vllm:num_requests_running", "gauge", base, "running"),
            ("vllm:num_requests_waiting", "vllm:num_requests_waiting", "gauge", base, "waiting"),
            ("vllm:kv_cache_usage_perc", "vllm:kv_cache_usage_perc", "gauge", base, "kv"),
            ("vllm:prefix_cache_queries_total", "vllm:prefix_cache_queries", "counter", base,
             "prompt"),
            ("vllm:prefix_cache_hits_total", "vllm:prefix_cache_hits", "counter", base, "hits"),
            ("vllm:num_preemptions_total", "vllm:num_preemptions", "counter", base, "preempted"),
            ("vllm:prompt_tokens_total", "vllm:prompt_tokens", "counter", base, "prompt"),
            ("vllm:generation_tokens_total", "vllm:generation_tokens", "counter", base,
             "generated"),
        ]  # fmt: skip
        for reason in FINISHED_REASONS:
            what = reason if reason in ("stop", "length") else "zero"
            labels = {**base, "finished_reason": reason}
            defs.append(
                ("vllm:request_success_total", "vllm:request_success", "counter", labels, what)
            )
        config = {**CACHE_CONFIG_LABELS, "num_gpu_blocks": str(d["num_gpu_blocks"])}
        defs.append(("vllm:cache_config_info", "vllm:cache_config_info", "gauge", config, "one"))
        for ord_, (metric, family, type_, labels, what) in enumerate(defs):
            rows.append(
                {
                    "dep_ix": d["dep_ix"],
                    "deployment": d["deployment"],
                    "ord": ord_,
                    "metric": metric,
                    "family": family,
                    "type": type_,
                    "labels": list(labels.items()),
                    "series_key": series_key(labels),
                    "what": what,
                }
            )
    return _table(rows, {"labels": pa.map_(pa.string(), pa.string())})


def _dcgm_series(replicas: list[dict[str, Any]]) -> pa.Table:
    """One DCGM GPU per replica, labelled as dcgm-exporter does; the UUID follows from the
    replica's name, so an appended hour continues the same series."""
    rows = []
    for r in replicas:
        h = f"{random.Random(r['replica']).getrandbits(128):032x}"
        labels = {
            "Hostname": r["host"],
            "UUID": f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}",
            "device": f"nvidia{r['rep_ix']}",
            "gpu": str(r["rep_ix"]),
            "modelName": GPU_MODEL_NAME,
            "pci_bus_id": f"00000000:{0x18 + 0x12 * r['rep_ix']:02X}:00.0",
        }
        rows.append(
            {
                "replica_gix": r["replica_gix"],
                "labels": list(labels.items()),
                "series_key": series_key(labels),
            }
        )
    return _table(rows, {"labels": pa.map_(pa.string(), pa.string())})


def _table(rows: list[dict[str, Any]], types: dict[str, pa.DataType] | None = None) -> pa.Table:
    types = types or {}
    columns = list(rows[0])
    return pa.table({c: pa.array([r[c] for r in rows], type=types.get(c)) for c in columns})


def _fleet(replicas: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    counts = split_replicas(replicas)
    deployments, reps = [], []
    first = 0
    for dep_ix, (d, count) in enumerate(zip(DEPLOYMENTS, counts, strict=True)):
        deployments.append({**d, "dep_ix": dep_ix, "replicas": count, "first_replica": first})
        for rep_ix in range(count):
            name = f"{d['engine_service']}-{rep_ix}"
            reps.append(
                {
                    "replica_gix": first + rep_ix,
                    "dep_ix": dep_ix,
                    "rep_ix": rep_ix,
                    "replica": name,
                    "host": d["host"],
                    "replica_keys": ENGINE_RESOURCE_KEYS,
                    "replica_values": [d["engine_service"], name, ENV, d["host"]],
                }
            )
        first += count
    return deployments, reps


def _route_table() -> pa.Table:
    rows = []
    for ix, r in enumerate(ROUTES):
        values = [r["service"], r["namespace"], r["version"], ENV, r["app"], r["team"], "python"]
        rows.append(
            {
                "route_ix": ix,
                **{k: v for k, v in r.items() if k not in ("weight", "version")},
                "resource_keys": APP_RESOURCE_KEYS,
                "resource_values": values,
            }
        )
    return _table(rows)


def _route_case() -> str:
    """CASE arms mapping u_route to a route index by the routes' cumulative weights. The
    thresholds are this module's constants, not input."""
    arms, acc = [], 0.0
    for ix, r in enumerate(ROUTES[:-1]):
        acc += r["weight"]
        arms.append(f"when u_route < {acc!r} then {ix}")
    arms.append(f"else {len(ROUTES) - 1}")
    return " ".join(arms)


def _setup(tx: Transaction, hours: list[Hour], replicas: int, seed: int) -> None:
    deployments, reps = _fleet(replicas)
    tx.execute(MACROS)
    sources = {
        "bench_hours_src": pa.table(
            {
                "hour_ix": list(range(len(hours))),
                "hour_ns": [h.start_ns for h in hours],
                "n": [h.requests for h in hours],
                "factor": [h.factor for h in hours],
            }
        ),
        "bench_routes_src": _route_table(),
        "bench_deployments_src": _table(deployments),
        "bench_replicas_src": _table(reps),
        "bench_vllm_series_src": _vllm_series(deployments),
        "bench_dcgm_series_src": _dcgm_series(reps),
    }
    with tx.arrow_inputs(sources):
        for name in sources:
            target = name.removesuffix("_src")
            if target == "bench_hours":
                tx.execute(
                    "create or replace temp table bench_hours as select *, "
                    "hash($seed::bigint, hour_ns) as hk, "
                    "strftime(make_timestamp(hour_ns // 1000), '%Y%m%d%H') as tag "
                    "from bench_hours_src",
                    {"seed": seed},
                )
            else:
                tx.execute(f"create or replace temp table {target} as select * from {name}")
    tx.execute(
        "create or replace temp table bench_buckets (replica_gix integer, k bigint, n bigint, "
        "n_length bigint, prompt hugeint, hits hugeint, generated hugeint, busy_s double, "
        "queue_s double, kv_token_s double)"
    )


def _teardown(tx: Transaction) -> None:
    for name in TEMP_TABLES:
        tx.execute(f"drop table if exists temp.{name}")


def _fill_chunk(tx: Transaction, lo: int, hi: int, t0_ns: int, k_count: int) -> int:
    """Generate hours [lo, hi) into spans; returns the span rows written."""
    tx.execute(
        REQUESTS.format(route_case=_route_case()),
        {
            "lo": lo,
            "hi": hi,
            "pair_p": PAIR_P,
            "fallback_p": FALLBACK_P,
            "hosted_model": HOSTED_MODEL,
        },
    )
    tx.execute(RETRY_STARTS)
    app_span = APP_SPAN.format(env=ENV)
    written = 0
    for sql in (ROOT_SPANS, CLIENT_SPANS, ENGINE_SPANS, RETRIEVAL_SPANS, TOOL_SPANS):
        params = {"hosted_response_model": HOSTED_RESPONSE_MODEL} if sql is CLIENT_SPANS else {}
        row = tx.execute(sql.format(app_span=app_span, env=ENV), params).fetchone()
        written += int(row[0]) if row else 0
    tx.execute(
        BUCKETS,
        {"t0_ns": t0_ns, "step_ns": SCRAPE_S * 1_000_000_000, "k_last": k_count - 1},
    )
    tx.execute("drop table temp.bench_req")
    return written


def _fill_scrapes(
    tx: Transaction, t0_ns: int, k_count: int, replicas: int, seed: int
) -> tuple[int, int]:
    """Scrapes and samples for the window of k_count scrapes from t0; returns the row counts."""
    t0_us = t0_ns // 1000
    k_offset = (t0_ns // 1_000_000_000) // SCRAPE_S  # draws depend on the absolute scrape slot
    tx.execute(BASE, {"t0_us": t0_us, "targets": replica_names(replicas)})
    tx.execute(
        GRID,
        {
            "seed": seed,
            "k_count": k_count,
            "k_offset": k_offset,
            "t0_us": t0_us,
            "step_us": SCRAPE_S * 1_000_000,
            "step_s": float(SCRAPE_S),
            "fail_p": SCRAPE_FAIL_P,
        },
    )
    scrapes = _rows(tx.execute(VLLM_SCRAPES))
    statements = DCGM_SCRAPES.split(";\n\n")
    tx.execute(statements[0], {"seed": seed, "k_offset": k_offset, "fail_p": SCRAPE_FAIL_P})
    scrapes += _rows(tx.execute(statements[1]))
    samples = 0
    for sql in SAMPLES.split(";\n\n"):
        samples += _rows(tx.execute(sql))
    return scrapes, samples


def _rows(tx: Transaction) -> int:
    row = tx.fetchone()
    return int(row[0]) if row else 0


def _configure_deployments(tx: Transaction) -> bool:
    """Config rows for the two deployments when the deployments table exists (schema 5);
    columns it lacks are left out. Returns whether rows were written."""
    columns = {
        r[0]
        for r in tx.execute(
            "select column_name from information_schema.columns "
            "where table_name = 'deployments' and table_schema = 'main'"
        ).fetchall()
    }
    if "deployment" not in columns:
        return False
    for d in DEPLOYMENTS:
        values = {
            "deployment": d["deployment"],
            "model": d["model"],
            "gpu_type": "H200",
            "gpus_per_replica": 1,
            "tensor_parallel": 1,
            "idle_policy": "separate",
            "environment": ENV,
            "source": "config",
        }
        names = [c for c in values if c in columns]
        tx.execute(
            f"insert or ignore into deployments ({', '.join(names)}) "
            f"values ({', '.join('?' for _ in names)})",
            [values[c] for c in names],
        )
    return True


def _fill(
    storage: Storage,
    hours: list[Hour],
    replicas: int,
    seed: int,
    chunk_requests: int,
    progress: bool,
) -> Generated:
    started = time.perf_counter()
    t0_ns = hours[0].start_ns
    k_count = len(hours) * 3600 // SCRAPE_S
    storage.write(lambda tx: _setup(tx, hours, replicas, seed))
    spans = 0
    try:
        lo = 0
        while lo < len(hours):
            hi, n = lo, 0
            while hi < len(hours) and (hi == lo or n + hours[hi].requests <= chunk_requests):
                n += hours[hi].requests
                hi += 1
            first, last = lo, hi
            spans += storage.write(
                lambda tx, a=first, b=last: _fill_chunk(tx, a, b, t0_ns, k_count)
            )
            if progress:
                done = sum(h.requests for h in hours[:hi])
                print(
                    f"  hours {lo}-{hi - 1}: {done:,} requests, {spans:,} spans, "
                    f"{time.perf_counter() - started:.1f} s",
                    file=sys.stderr,
                )
            lo = hi
        scrapes, samples = storage.write(
            lambda tx: _fill_scrapes(tx, t0_ns, k_count, replicas, seed)
        )
    finally:
        storage.write(_teardown)
    end_ns = hours[-1].start_ns + HOUR_NS
    return Generated(
        requests=sum(h.requests for h in hours),
        spans=spans,
        scrapes=scrapes,
        samples=samples,
        start=datetime.fromtimestamp(t0_ns / 1e9, UTC),
        end=datetime.fromtimestamp(end_ns / 1e9, UTC),
        seconds=time.perf_counter() - started,
    )


def generate(
    db_path: str | os.PathLike[str],
    requests: int,
    rate_per_s: float = 50.0,
    start: datetime = DEFAULT_START,
    replicas: int = 8,
    seed: int = 1,
    *,
    chunk_requests: int = 1_000_000,
    memory_limit: str = "2GB",
    threads: int = 2,
    progress: bool = False,
    weekly: bool = False,
    max_hours: int | None = None,
) -> Generated:
    """Create a new database at `db_path` (through Storage, so the schema is the real one) and
    fill spans, scrapes and metric_samples with `requests` requests arriving at `rate_per_s`
    on average from `start` (stopping after `max_hours` hours if given; `weekly` adds the
    weekly pattern of :func:`plan_hours`); deployments get config rows when that table
    exists. The price book is left to its seed (the server seeds it at start)."""
    if Path(db_path).exists():
        raise FileExistsError(f"{db_path} exists; generate() only fills a new database")
    hours = plan_hours(requests, rate_per_s, start, seed, weekly=weekly, max_hours=max_hours)
    with Storage(db_path, memory_limit=memory_limit, threads=threads) as storage:
        storage.write(_configure_deployments)
        return _fill(storage, hours, replicas, seed, chunk_requests, progress)


def append_hours(
    storage: Storage,
    hours: int = 1,
    rate_per_s: float = 50.0,
    seed: int = 2,
    replicas: int | None = None,
) -> Generated:
    """Append `hours` hours of flat `rate_per_s` traffic right after the newest scrape (the
    incremental-refresh benchmark): the same fleet (replica count read from the scrapes unless
    given), counters continuing where they stood."""
    row = storage.fetchall(
        "select max(ts), count(distinct target) filter (where kind = 'vllm') from scrapes"
    )[0]
    if row[0] is None:
        raise ValueError("no scrapes in the database: generate() it first")
    last: datetime = row[0]
    start = (last + timedelta(hours=1)).replace(minute=0, second=0, microsecond=0)
    plan = plan_hours(round(rate_per_s * 3600 * hours), rate_per_s, start, seed, diurnal=False)
    return _fill(storage, plan, replicas or int(row[1]), seed, 1_000_000, progress=False)


def _sizes(path: str) -> str:
    total = sum(os.path.getsize(p) for p in (path, path + ".wal") if os.path.exists(p))
    return f"{total / 2**20:,.0f} MiB"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--requests", type=int, default=1_000_000)
    parser.add_argument("--db", required=True)
    parser.add_argument("--rate", type=float, default=50.0, help="mean requests/s (50)")
    parser.add_argument("--start", default=DEFAULT_START.strftime("%Y-%m-%dT%H:00:00+00:00"))
    parser.add_argument("--replicas", type=int, default=8)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--chunk", type=int, default=1_000_000, help="requests per transaction")
    parser.add_argument("--memory-limit", default="2GB")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--force", action="store_true", help="replace an existing database")
    parser.add_argument(
        "--weeks",
        type=int,
        default=None,
        help="generate this many weeks with the weekly pattern (weekdays busier, day-to-day "
        "noise, a mild trend) instead of stopping at --requests",
    )
    args = parser.parse_args(argv)

    db = Path(args.db)
    if args.force:
        for p in (db, Path(f"{db}.wal")):
            p.unlink(missing_ok=True)
    free = shutil.disk_usage(db.parent if db.parent.exists() else Path.cwd()).free
    # ~95 bytes a span (docs/benchmarks.md), ~3.8 spans a request, x3 headroom for the WAL.
    need = args.requests * 3.8 * 95 * 3
    if free < need:
        print(f"not enough disk: {free / 2**30:.1f} GiB free, ~{need / 2**30:.1f} GiB needed")
        return 2
    start = datetime.fromisoformat(args.start)
    if args.weeks is not None:
        # Enough requests never to run out first; the hour cap ends the data.
        args.requests = round(args.rate * 3600 * 168 * args.weeks * 2)
    result = generate(
        db,
        args.requests,
        args.rate,
        start,
        args.replicas,
        args.seed,
        chunk_requests=args.chunk,
        memory_limit=args.memory_limit,
        threads=args.threads,
        progress=True,
        weekly=args.weeks is not None,
        max_hours=None if args.weeks is None else 168 * args.weeks,
    )
    print(
        f"{result.requests:,} requests from {result.start:%Y-%m-%d %H:%M} to "
        f"{result.end:%Y-%m-%d %H:%M} UTC: {result.spans:,} spans, {result.scrapes:,} scrapes, "
        f"{result.samples:,} samples in {result.seconds:.1f} s; {db}: {_sizes(str(db))}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
