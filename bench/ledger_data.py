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

# ---------------------------------------------------------------------------- the fleet
# Deployments as in docs/demo.md. Step-time figures are rough H200 numbers: prefill tokens/s of
# one replica and seconds per output token under a typical batch; queue_mean_s is the mean wait of a
# request that waits at all, at the mean load (it grows with the square of the hour's load).
DEPLOYMENTS = (
    {
        "deployment": "llama-3.1-8b-h200",
        "model": "meta-llama/Llama-3.1-8B-Instruct",
        "engine_service": "vllm-llama-8b",
        "host": "gpu-node-a",
        "server_address": "llama-8b.inference.svc.cluster.local",
        "prefill_tok_s": 25_000.0,
        "tpot_s": 0.012,
        "queue_mean_s": 0.05,
        "num_gpu_blocks": 51_828,
    },
    {
        "deployment": "llama-3.1-70b-fp8-h200",
        "model": "meta-llama/Llama-3.1-70B-Instruct",
        "engine_service": "vllm-llama-70b",
        "host": "gpu-node-b",
        "server_address": "llama-70b.inference.svc.cluster.local",
        "prefill_tok_s": 6_000.0,
        "tpot_s": 0.030,
        "queue_mean_s": 0.4,
        "num_gpu_blocks": 10_337,
    },
)

_SUPPORT = {
    "app": "support-assistant",
    "service": "support-assistant",
    "namespace": "cx",
    "version": "3.4.1",
    "team": "customer-experience",
}
# One row per route: share of requests, app identity, token ranges (input skew: u**skew),
# cached fraction range, retrieval/tool probability and service, review, outcome shares.
# Retrieval: .45*.7 + .25 + .12*.3 = 60 %; tools: .25*.3 + .08 = 15.5 %.
ROUTES = (
    {
        "weight": 0.45, "app": "code-assistant", "service": "code-assistant",
        "namespace": "devprod", "version": "2.8.0", "team": "developer-productivity",
        "route": "/complete", "workflow": "code-completion", "dep_ix": 0,
        "temperature": "0.2", "max_tokens": 256, "in_lo": 3000, "in_hi": 8000, "in_skew": 1.0,
        "c_lo": 0.55, "c_hi": 0.95, "out_lo": 8, "out_hi": 160,
        "ret_p": 0.7, "ret_name": "code-context", "ret_db": "elasticsearch",
        "ret_address": "search.devprod.svc.cluster.local", "ret_top_k": "8",
        "ret_ms_lo": 10.0, "ret_ms_hi": 40.0,
        "tool_p": 0.0, "tool_name": "none", "tool_ms_lo": 0.0, "tool_ms_hi": 0.0,
        "review_p": 0.0, "review_s": 0.0, "acc_p": 0.31, "corr_p": 0.0,
    },
    {
        "weight": 0.25, **_SUPPORT, "route": "/answer", "workflow": "answer-ticket",
        "dep_ix": 0, "temperature": "0.3", "max_tokens": 1024,
        "in_lo": 2400, "in_hi": 4400, "in_skew": 1.0, "c_lo": 0.45, "c_hi": 0.85,
        "out_lo": 24, "out_hi": 420,
        "ret_p": 1.0, "ret_name": "support-kb", "ret_db": "qdrant",
        "ret_address": "qdrant.search.svc.cluster.local", "ret_top_k": "4",
        "ret_ms_lo": 30.0, "ret_ms_hi": 70.0,
        "tool_p": 0.3, "tool_name": "lookup_order", "tool_ms_lo": 30.0, "tool_ms_hi": 120.0,
        "review_p": 0.1, "review_s": 75.0, "acc_p": 0.72, "corr_p": 0.14,
    },
    {
        "weight": 0.12, "app": "internal-chat", "service": "internal-chat",
        "namespace": "platform", "version": "1.2.0", "team": "platform",
        "route": "/chat", "workflow": "chat", "dep_ix": 1,
        "temperature": "0.7", "max_tokens": 2048, "in_lo": 300, "in_hi": 9000, "in_skew": 2.0,
        "c_lo": 0.5, "c_hi": 0.95, "out_lo": 40, "out_hi": 700,
        "ret_p": 0.3, "ret_name": "wiki", "ret_db": "pgvector",
        "ret_address": "pgvector.platform.svc.cluster.local", "ret_top_k": "6",
        "ret_ms_lo": 40.0, "ret_ms_hi": 120.0,
        "tool_p": 0.0, "tool_name": "none", "tool_ms_lo": 0.0, "tool_ms_hi": 0.0,
        "review_p": 0.0, "review_s": 0.0, "acc_p": 0.80, "corr_p": 0.05,
    },
    {
        "weight": 0.10, **_SUPPORT, "route": "/summarize", "workflow": "summarize-ticket",
        "dep_ix": 0, "temperature": "0.3", "max_tokens": 512,
        "in_lo": 1000, "in_hi": 12800, "in_skew": 2.0, "c_lo": 0.05, "c_hi": 0.2,
        "out_lo": 100, "out_hi": 400,
        "ret_p": 0.0, "ret_name": "none", "ret_db": "none", "ret_address": "none",
        "ret_top_k": "0", "ret_ms_lo": 0.0, "ret_ms_hi": 0.0,
        "tool_p": 0.0, "tool_name": "none", "tool_ms_lo": 0.0, "tool_ms_hi": 0.0,
        "review_p": 0.0, "review_s": 0.0, "acc_p": 0.75, "corr_p": 0.15,
    },
    {
        "weight": 0.08, "app": "document-extraction", "service": "doc-extractor",
        "namespace": "finance", "version": "0.9.3", "team": "finance-ops",
        "route": "/extract", "workflow": "extract-invoice", "dep_ix": 0,
        "temperature": "0.0", "max_tokens": 2048, "in_lo": 5400, "in_hi": 7400, "in_skew": 1.0,
        "c_lo": 0.18, "c_hi": 0.26, "out_lo": 300, "out_hi": 900,
        "ret_p": 0.0, "ret_name": "none", "ret_db": "none", "ret_address": "none",
        "ret_top_k": "0", "ret_ms_lo": 0.0, "ret_ms_hi": 0.0,
        "tool_p": 1.0, "tool_name": "post_to_erp", "tool_ms_lo": 80.0, "tool_ms_hi": 400.0,
        "review_p": 1.0, "review_s": 40.0, "acc_p": 0.70, "corr_p": 0.20,
    },
)  # fmt: skip

APP_RESOURCE_KEYS = [
    "service.name",
    "service.namespace",
    "service.version",
    "deployment.environment.name",
    "inferledger.app",
    "inferledger.team",
    "telemetry.sdk.language",
]
ENGINE_RESOURCE_KEYS = [
    "service.name",
    "service.instance.id",
    "deployment.environment.name",
    "host.name",
]
# vLLM's cache_config_info labels (vLLM 0.11, as the demo exports them), num_gpu_blocks aside.
CACHE_CONFIG_LABELS = {
    "block_size": "16", "cache_dtype": "auto", "calculate_kv_scales": "False",
    "cpu_kvcache_space_bytes": "None", "cpu_offload_gb": "0", "enable_prefix_caching": "True",
    "engine": "0", "gpu_memory_utilization": "0.9", "is_attention_free": "False",
    "kv_cache_memory_bytes": "None", "kv_offloading_backend": "None",
    "kv_offloading_size": "None", "kv_sharing_fast_prefill": "False",
    "mamba_block_size": "None", "mamba_cache_dtype": "auto", "mamba_page_size_padded": "None",
    "mamba_ssm_cache_dtype": "auto", "num_cpu_blocks": "0", "num_gpu_blocks_override": "None",
    "prefix_caching_hash_algo": "sha256", "sliding_window": "None", "swap_space": "4",
}  # fmt: skip
FINISHED_REASONS = ("stop", "length", "abort", "error", "repetition")
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


# ---------------------------------------------------------------------------- SQL
# Every random draw is u(key, j, salt): uniform [0, 1) from DuckDB's 64-bit hash of the hour's
# key (hash(seed, hour)), the request's index in the hour and a salt naming the draw.
# hash(k, j, s) alone is not enough: DuckDB combines argument hashes as (h * C) ^ h(s), so two
# salts of one (k, j) differ by a constant XOR and their draws are correlated (corr 0.6
# measured); hashing the combined value again mixes them apart (corr < 0.001).
_MACROS = """
create or replace temp macro bench_h(k, j, s) as hash(hash(k, j, s));
create or replace temp macro bench_u(k, j, s) as (bench_h(k, j, s) >> 11)::double * 1.1102230246251565e-16;
create or replace temp macro bench_id(k, j, s) as printf('%016x', bench_h(k, j, s) | 1::ubigint);
"""  # noqa: E501

# One row per request of the chunk: identity, route, draws, durations and offsets (ns) of every
# span from the root's start. Each CTE computes what the previous one's columns allow: DuckDB
# inlines a select-list alias wherever it is used, so chaining aliases in one select would
# compute the shared draws many times over (measured 3x slower).
_REQUESTS = """
create or replace temp table bench_req as
with slots as (
    select hour_ix, hour_ns, n, factor, hk, tag, unnest(range(n)) as j
    from bench_hours where hour_ix >= $lo and hour_ix < $hi
),

tasks as (
    select
        *,
        j % 2 = 0 and j + 1 < n and bench_u(hk, j, 1) < $pair_p as retried,
        j % 2 = 1 and bench_u(hk, j - 1, 1) < $pair_p as is_retry
    from slots
),

routed as (
    select *, case {route_case} end as route_ix
    from (select *, j - is_retry::integer as tj from tasks)
    cross join lateral (select bench_u(hk, tj, 2) as u_route)
),

drawn as (
    select
        x.* exclude (u_route), r.* exclude (route_ix), d.* exclude (dep_ix),
        printf('%016x%016x', bench_h(x.hk, x.j, 101), bench_h(x.hk, x.j, 102)) as trace_id,
        bench_id(x.hk, x.j, 103) as root_id,
        bench_id(x.hk, x.j, 104) as client_id,
        bench_id(x.hk, x.j, 105) as engine_id,
        bench_id(x.hk, x.j, 106) as retrieval_id,
        bench_id(x.hk, x.j, 107) as tool_id,
        'chatcmpl-' || printf('%016x%08x', bench_h(x.hk, x.j, 108), bench_h(x.hk, x.j, 109) >> 32)
            as request_id,
        'call_' || printf('%016x', bench_h(x.hk, x.j, 110)) as tool_call_id,
        r.workflow || '-' || x.tag || '-' || lpad(x.tj::varchar, 6, '0') as task_id,
        x.is_retry and bench_u(x.hk, x.tj, 5) < $fallback_p as hosted,
        x.retried and bench_u(x.hk, x.j, 4) < 0.5 as fail_timeout,
        x.is_retry::integer + 1 as attempt,
        d.first_replica
            + least(floor(d.replicas * pow(bench_u(x.hk, x.j, 6), 1.5)), d.replicas - 1)::integer
            as replica_gix,
        (r.in_lo + floor(pow(bench_u(x.hk, x.j, 7), r.in_skew) * (r.in_hi - r.in_lo)))::bigint
            as input_tokens,
        bench_u(x.hk, x.j, 8) as u_cached,
        (r.out_lo + floor(pow(bench_u(x.hk, x.j, 9), 1.5) * (r.out_hi - r.out_lo)))::bigint
            as output_tokens,
        bench_u(x.hk, x.j, 10) < r.ret_p as has_retrieval,
        bench_u(x.hk, x.j, 11) < r.tool_p as has_tool,
        bench_u(x.hk, x.j, 12) < 0.03 as finish_length,
        case
            when bench_u(x.hk, x.j, 13) < 0.8 - 0.4 * greatest(x.factor - 1, 0) then 0.0
            else round(-ln(1 - bench_u(x.hk, x.j, 14)) * d.queue_mean_s * x.factor * x.factor, 6)
        end as queue_s,
        (0.8 + 0.4 * bench_u(x.hk, x.j, 15)) * (0.7 + 0.3 * x.factor) as prefill_noise,
        (0.85 + 0.3 * bench_u(x.hk, x.j, 16)) * (0.8 + 0.4 * x.factor) as decode_noise,
        0.25 + 0.6 * bench_u(x.hk, x.j, 17) as hosted_ttft_s,
        60 + 60 * bench_u(x.hk, x.j, 18) as hosted_tok_s,
        bench_u(x.hk, x.tj, 3) as u_outcome,
        bench_u(x.hk, x.tj, 19) < r.review_p as reviewed,
        round(r.review_s * (0.5 + bench_u(x.hk, x.tj, 20)), 3) as review_s_drawn,
        (x.hour_ns + floor((x.j + bench_u(x.hk, x.j, 30)) / x.n * 3600e9))::bigint as arrival_ns,
        1000000 + floor(2e6 * bench_u(x.hk, x.j, 31))::bigint as retrieval_off,
        floor((r.ret_ms_lo + (r.ret_ms_hi - r.ret_ms_lo) * bench_u(x.hk, x.j, 32)) * 1e6)::bigint
            as retrieval_ns,
        500000 + floor(1e6 * bench_u(x.hk, x.j, 33))::bigint as client_gap_ns,
        300000 + floor(1e6 * bench_u(x.hk, x.j, 34))::bigint as tool_gap_ns,
        floor((r.tool_ms_lo + (r.tool_ms_hi - r.tool_ms_lo) * bench_u(x.hk, x.j, 35)) * 1e6)
            ::bigint as tool_ns,
        1000000 + floor(2e6 * bench_u(x.hk, x.j, 36))::bigint as root_gap_ns,
        floor((0.2 + 1.8 * bench_u(x.hk, x.j, 37)) * 1e9)::bigint as retry_delay_ns
    from routed as x
    inner join bench_routes as r on r.route_ix = x.route_ix
    inner join bench_deployments as d on d.dep_ix = r.dep_ix
),

sized as (
    select
        * exclude (u_cached, prefill_noise, decode_noise, hosted_ttft_s, hosted_tok_s),
        least(input_tokens - 1, floor(input_tokens * (c_lo + u_cached * (c_hi - c_lo)) / 16) * 16)
            ::bigint as cached_input_tokens,
        round(0.008 + (input_tokens * (1 - c_lo - u_cached * (c_hi - c_lo))) / prefill_tok_s
            * prefill_noise, 6) as prefill_s,
        round((output_tokens - 1) * tpot_s * decode_noise, 6) as decode_s,
        hosted_ttft_s + output_tokens / hosted_tok_s as hosted_s,
        case when has_retrieval then retrieval_off + retrieval_ns else 0 end + client_gap_ns
            as client_off
    from drawn
),

timed as (
    select
        *,
        client_off + 800000 as engine_off,
        round((queue_s + prefill_s + decode_s) * 1e9)::bigint as engine_ns,
        case
            when hosted then client_off + round(hosted_s * 1e9)::bigint
            else client_off + round((queue_s + prefill_s + decode_s) * 1e9)::bigint + 1600000
        end as client_end_off
    from sized
),

final as (
    select
        t.* exclude (client_gap_ns, tool_gap_ns, root_gap_ns, u_outcome),
        t.client_end_off + t.tool_gap_ns as tool_off,
        greatest(t.client_end_off, case when t.has_tool then t.client_end_off + t.tool_gap_ns
            + t.tool_ns else 0 end) + t.root_gap_ns as root_ns,
        t.arrival_ns as start_ns,
        case
            when t.retried then null
            when t.u_outcome < t.acc_p then 'accepted'
            when t.u_outcome < t.acc_p + t.corr_p then 'corrected'
            else 'rejected'
        end as outcome,
        case when t.hosted then $hosted_model else t.model end as call_model,
        rp.replica, rp.replica_keys, rp.replica_values
    from timed as t
    inner join bench_replicas as rp on rp.replica_gix = t.replica_gix
)

-- In arrival order, as ingest stores spans: the span inserts below keep it, so every row group
-- covers a short time range and time-filtered reads skip the rest (the joins above reorder).
select * from final order by arrival_ns
"""

# A retry starts 0.2-2 s after its first attempt (the slot before it) ended.
_RETRY_STARTS = """
update bench_req as r
set start_ns = p.first_end_ns + r.retry_delay_ns
from (
    select hour_ix, j + 1 as j, arrival_ns + root_ns as first_end_ns
    from bench_req where retried
) as p
where r.hour_ix = p.hour_ix and r.j = p.j
"""

_APP_SPAN = """
        service as service_name, namespace as service_namespace, '{env}' as environment,
        'inferledger.bench.app' as scope_name, '1.0.0' as scope_version,
        resource_keys, resource_values
"""

_ROOT_SPANS = """
insert into spans by name
select
    trace_id, root_id as span_id, 0 as flags, 'POST ' || route as name, 2 as kind,
    start_ns, start_ns + root_ns as end_ns,
    case when retried then 2 else 0 end as status_code,
    case
        when fail_timeout then 'timeout: the model did not answer in time'
        when retried then 'guardrail_blocked: output rejected by the app'
    end as status_message,
    app, team, route, task_id, workflow, attempt, hosted as fallback, outcome,
    case when reviewed and not retried then review_s_drawn end as review_s,
    case
        when retried then ['http.request.method', 'url.path', 'http.response.status_code',
                           'error.type', 'http.route']
        else ['http.request.method', 'url.path', 'http.response.status_code', 'http.route']
    end as attr_keys,
    case
        when fail_timeout then ['POST', route, '504', 'timeout', route]
        when retried then ['POST', route, '502', 'guardrail_blocked', route]
        else ['POST', route, '200', route]
    end as attr_values,
    {app_span}
from bench_req
"""

_CLIENT_SPANS = """
insert into spans by name
select
    trace_id, client_id as span_id, root_id as parent_span_id, 0 as flags,
    'chat ' || call_model as name, 3 as kind,
    start_ns + client_off as start_ns, start_ns + client_end_off as end_ns,
    case when fail_timeout then 2 else 0 end as status_code,
    case when fail_timeout then 'timeout' end as status_message,
    'chat' as gen_ai_operation,
    case when hosted then 'openai' else 'vllm' end as gen_ai_provider,
    call_model as request_model,
    case when hosted then $hosted_response_model else call_model end as response_model,
    request_id as gen_ai_request_id, input_tokens, output_tokens,
    case when hosted then (cached_input_tokens // 128) * 128 else cached_input_tokens end
        as cached_input_tokens,
    max_tokens as request_max_tokens,
    case when finish_length then '["length"]' else '["stop"]' end as finish_reasons,
    app, team, task_id, attempt, hosted as fallback,
    case
        when fail_timeout then ['gen_ai.request.temperature', 'server.address', 'server.port',
                                'error.type']
        else ['gen_ai.request.temperature', 'server.address', 'server.port']
    end as attr_keys,
    case
        when hosted then [temperature, 'api.openai.com', '443']
        when fail_timeout then [temperature, server_address, '8000', 'timeout']
        else [temperature, server_address, '8000']
    end as attr_values,
    {app_span}
from bench_req
"""

_ENGINE_SPANS = """
insert into spans by name
select
    trace_id, engine_id as span_id, client_id as parent_span_id, 768 as flags,
    'llm_request' as name, 2 as kind,
    start_ns + engine_off as start_ns, start_ns + engine_off + engine_ns as end_ns,
    0 as status_code,
    engine_service as service_name, replica as service_instance_id,
    '{env}' as environment, 'vllm.llm_engine' as scope_name, '' as scope_version,
    request_id as gen_ai_request_id, input_tokens, output_tokens,
    max_tokens as request_max_tokens,
    queue_s as latency_queue_s, queue_s + prefill_s as latency_ttft_s,
    prefill_s as latency_prefill_s, decode_s as latency_decode_s,
    prefill_s + decode_s as latency_inference_s, queue_s + prefill_s + decode_s as latency_e2e_s,
    ['gen_ai.request.temperature'] as attr_keys, [temperature] as attr_values,
    replica_keys as resource_keys, replica_values as resource_values
from bench_req
where not hosted
"""

_RETRIEVAL_SPANS = """
insert into spans by name
select
    trace_id, retrieval_id as span_id, root_id as parent_span_id, 0 as flags,
    'retrieval ' || ret_name as name, 3 as kind,
    start_ns + retrieval_off as start_ns, start_ns + retrieval_off + retrieval_ns as end_ns,
    0 as status_code, 'retrieval' as gen_ai_operation, app, team, 'retrieval' as stage,
    ['gen_ai.data_source.id', 'gen_ai.request.top_k', 'db.system.name', 'db.collection.name',
     'server.address'] as attr_keys,
    [ret_name, ret_top_k, ret_db, ret_name, ret_address] as attr_values,
    {app_span}
from bench_req
where has_retrieval
"""

_TOOL_SPANS = """
insert into spans by name
select
    trace_id, tool_id as span_id, root_id as parent_span_id, 0 as flags,
    'execute_tool ' || tool_name as name, 1 as kind,
    start_ns + tool_off as start_ns, start_ns + tool_off + tool_ns as end_ns,
    0 as status_code, 'execute_tool' as gen_ai_operation, app, team, 'tools' as stage,
    ['gen_ai.tool.name', 'gen_ai.tool.type', 'gen_ai.tool.call.id'] as attr_keys,
    [tool_name, 'function', tool_call_id] as attr_values,
    {app_span}
from bench_req
where has_tool
"""

# Per replica and scrape interval (k-1, k]: what the engine requests that finished in it add to
# vLLM's counters, and their busy/queue/KV time for the gauges.
_BUCKETS = """
insert into bench_buckets
select
    replica_gix,
    least(greatest(ceil((start_ns + engine_off + engine_ns - $t0_ns) / $step_ns), 0), $k_last)
        ::bigint as k,
    count(*) as n,
    count(*) filter (where finish_length) as n_length,
    sum(input_tokens) as prompt,
    sum(cached_input_tokens) as hits,
    sum(output_tokens) as generated,
    sum(prefill_s + decode_s) as busy_s,
    sum(queue_s) as queue_s,
    sum((input_tokens + output_tokens / 2) * (prefill_s + decode_s)) as kv_token_s
from bench_req
where not hosted
group by all
"""

# One row per replica and scrape of the window: counters as running sums from the window start
# (plus where the replica's series stood before it), gauges from the interval's requests.
_GRID = """
create or replace temp table bench_grid as
with cells as (
    select
        rp.replica_gix, rp.replica, rp.dep_ix, rp.rep_ix, g.k,
        coalesce(b.n, 0) as n, coalesce(b.n_length, 0) as n_length,
        coalesce(b.prompt, 0) as prompt, coalesce(b.hits, 0) as hits,
        coalesce(b.generated, 0) as generated, coalesce(b.busy_s, 0) as busy_s,
        coalesce(b.queue_s, 0) as queue_s, coalesce(b.kv_token_s, 0) as kv_token_s,
        bench_u(hash($seed, rp.replica_gix), g.k + $k_offset, 40) as u_noise,
        bench_u(hash($seed, rp.replica_gix), g.k + $k_offset, 41) as u_fail
    from bench_replicas as rp
    cross join range($k_count) as g(k)
    left join (
        select replica_gix, k, sum(n) as n, sum(n_length) as n_length, sum(prompt) as prompt,
               sum(hits) as hits, sum(generated) as generated, sum(busy_s) as busy_s,
               sum(queue_s) as queue_s, sum(kv_token_s) as kv_token_s
        from bench_buckets group by all
    ) as b on b.replica_gix = rp.replica_gix and b.k = g.k
),

gauges as (
    select
        c.*,
        $t0_us + c.k * $step_us as ts_us,
        round(c.busy_s / $step_s * (0.9 + 0.2 * c.u_noise)) as running,
        floor(c.queue_s / $step_s + c.u_noise) as waiting,
        least(0.995, c.kv_token_s / $step_s / (d.num_gpu_blocks * 16.0)) as kv_usage,
        least(100.0, round(100 * (1 - exp(-c.busy_s / $step_s)))) as gpu_util,
        case
            when kv_usage > 0.85 then floor(5 * c.u_noise)
            when c.u_noise < 0.001 then 1
            else 0
        end as preempted,
        c.u_fail < $fail_p as failed
    from cells as c
    inner join bench_deployments as d on d.dep_ix = c.dep_ix
),

final as (
    select
        *,
        sum(prompt) over running as c_prompt,
        sum(hits) over running as c_hits,
        sum(generated) over running as c_generated,
        sum(n - n_length) over running as c_stop,
        sum(n_length) over running as c_length,
        sum(preempted) over running as c_preempted
    from gauges
    window running as (partition by replica_gix order by k)
)

select * from final
"""

_VLLM_SCRAPES = """
insert into scrapes (ts, target, kind, deployment, url, up, duration_s, samples, http_status,
                     error)
select
    to_timestamp(g.ts_us / 1e6), g.replica, 'vllm', d.deployment,
    'http://' || g.replica || ':8000/metrics', not g.failed,
    round(0.004 + 0.02 * g.u_noise, 4),
    case when g.failed then 0 else d.series end,
    case when g.failed then null else 200 end,
    case when g.failed then 'connection refused' end
from bench_grid as g
inner join (
    select dep_ix, any_value(deployment) as deployment, count(*) as series
    from bench_vllm_series group by dep_ix
) as d on d.dep_ix = g.dep_ix
order by g.k, g.replica_gix
"""

_DCGM_SCRAPES = """
create or replace temp table bench_dcgm as
select
    g.dep_ix, g.k, any_value(g.ts_us) as ts_us, count(*) as gpus,
    bench_u(hash($seed, 1000 + g.dep_ix), g.k + $k_offset, 42) < $fail_p as failed,
    bench_u(hash($seed, 1000 + g.dep_ix), g.k + $k_offset, 43) as u_noise
from bench_grid as g group by g.dep_ix, g.k;

insert into scrapes (ts, target, kind, deployment, url, up, duration_s, samples, http_status,
                     error)
select
    to_timestamp(c.ts_us / 1e6), 'dcgm-' || d.host, 'dcgm', d.deployment,
    'http://' || d.host || ':9400/metrics', not c.failed,
    round(0.002 + 0.01 * c.u_noise, 4),
    case when c.failed then 0 else c.gpus end,
    case when c.failed then null else 200 end,
    case when c.failed then 'connection refused' end
from bench_dcgm as c
inner join bench_deployments as d on d.dep_ix = c.dep_ix
order by c.k, c.dep_ix
"""

_SAMPLES = """
insert into metric_samples (ts, target, metric, family, type, labels, series_key, le, value)
select
    to_timestamp(g.ts_us / 1e6), g.replica, s.metric, s.family, s.type, s.labels, s.series_key,
    null,
    coalesce(base.value, 0) + case s.what
        when 'prompt' then g.c_prompt
        when 'hits' then g.c_hits
        when 'generated' then g.c_generated
        when 'stop' then g.c_stop
        when 'length' then g.c_length
        when 'preempted' then g.c_preempted
        when 'running' then g.running
        when 'waiting' then g.waiting
        when 'kv' then g.kv_usage
        when 'one' then 1
        else 0
    end
from bench_grid as g
inner join bench_vllm_series as s on s.dep_ix = g.dep_ix
left join bench_base as base
    on base.target = g.replica and base.metric = s.metric and base.series_key = s.series_key
where not g.failed
order by g.k, g.replica_gix, s.ord;

insert into metric_samples (ts, target, metric, family, type, labels, series_key, le, value)
select
    to_timestamp(g.ts_us / 1e6), 'dcgm-' || d.host, 'DCGM_FI_DEV_GPU_UTIL',
    'DCGM_FI_DEV_GPU_UTIL', 'gauge', s.labels, s.series_key, null, g.gpu_util
from bench_grid as g
inner join bench_dcgm as c on c.dep_ix = g.dep_ix and c.k = g.k
inner join bench_dcgm_series as s on s.replica_gix = g.replica_gix
inner join bench_deployments as d on d.dep_ix = g.dep_ix
where not c.failed
order by g.k, g.replica_gix
"""

# Where each counter series of a replica stood at the last sample before the window (so an
# appended hour continues the history instead of resetting every counter).
_BASE = """
create or replace temp table bench_base as
select target, metric, series_key, arg_max(value, ts) as value
from metric_samples
where ts < to_timestamp($t0_us / 1e6) and ts >= to_timestamp($t0_us / 1e6) - interval 1 day
  and type = 'counter' and list_contains($targets, target)
group by all
"""


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
    tx.execute(_MACROS)
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
        _REQUESTS.format(route_case=_route_case()),
        {
            "lo": lo,
            "hi": hi,
            "pair_p": PAIR_P,
            "fallback_p": FALLBACK_P,
            "hosted_model": HOSTED_MODEL,
        },
    )
    tx.execute(_RETRY_STARTS)
    app_span = _APP_SPAN.format(env=ENV)
    written = 0
    for sql in (_ROOT_SPANS, _CLIENT_SPANS, _ENGINE_SPANS, _RETRIEVAL_SPANS, _TOOL_SPANS):
        params = {"hosted_response_model": HOSTED_RESPONSE_MODEL} if sql is _CLIENT_SPANS else {}
        row = tx.execute(sql.format(app_span=app_span, env=ENV), params).fetchone()
        written += int(row[0]) if row else 0
    tx.execute(
        _BUCKETS,
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
    tx.execute(_BASE, {"t0_us": t0_us, "targets": replica_names(replicas)})
    tx.execute(
        _GRID,
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
    scrapes = _rows(tx.execute(_VLLM_SCRAPES))
    statements = _DCGM_SCRAPES.split(";\n\n")
    tx.execute(statements[0], {"seed": seed, "k_offset": k_offset, "fail_p": SCRAPE_FAIL_P})
    scrapes += _rows(tx.execute(statements[1]))
    samples = 0
    for sql in _SAMPLES.split(";\n\n"):
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
