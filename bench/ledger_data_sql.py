"""The SQL that bench/ledger_data.py runs inside DuckDB to generate a benchmark ledger: the
draw macros, one row per request, the spans of each request, the hour buckets, the scrape grid
and its vLLM and DCGM samples. Plain text with DuckDB parameters ($name) and, in REQUESTS and
APP_SPAN, str.format fields the generator fills."""

# Every random draw is u(key, j, salt): uniform [0, 1) from DuckDB's 64-bit hash of the hour's
# key (hash(seed, hour)), the request's index in the hour and a salt naming the draw.
# hash(k, j, s) alone is not enough: DuckDB combines argument hashes as (h * C) ^ h(s), so two
# salts of one (k, j) differ by a constant XOR and their draws are correlated (corr 0.6
# measured); hashing the combined value again mixes them apart (corr < 0.001).
MACROS = """
create or replace temp macro bench_h(k, j, s) as hash(hash(k, j, s));
create or replace temp macro bench_u(k, j, s) as (bench_h(k, j, s) >> 11)::double * 1.1102230246251565e-16;
create or replace temp macro bench_id(k, j, s) as printf('%016x', bench_h(k, j, s) | 1::ubigint);
"""  # noqa: E501

# One row per request of the chunk: identity, route, draws, durations and offsets (ns) of every
# span from the root's start. Each CTE computes what the previous one's columns allow: DuckDB
# inlines a select-list alias wherever it is used, so chaining aliases in one select would
# compute the shared draws many times over (measured 3x slower).
REQUESTS = """
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
RETRY_STARTS = """
update bench_req as r
set start_ns = p.first_end_ns + r.retry_delay_ns
from (
    select hour_ix, j + 1 as j, arrival_ns + root_ns as first_end_ns
    from bench_req where retried
) as p
where r.hour_ix = p.hour_ix and r.j = p.j
"""

APP_SPAN = """
        service as service_name, namespace as service_namespace, '{env}' as environment,
        'inferledger.bench.app' as scope_name, '1.0.0' as scope_version,
        resource_keys, resource_values
"""

ROOT_SPANS = """
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

CLIENT_SPANS = """
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

ENGINE_SPANS = """
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

RETRIEVAL_SPANS = """
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

TOOL_SPANS = """
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
BUCKETS = """
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
GRID = """
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

VLLM_SCRAPES = """
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

DCGM_SCRAPES = """
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

SAMPLES = """
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
BASE = """
create or replace temp table bench_base as
select target, metric, series_key, arg_max(value, ts) as value
from metric_samples
where ts < to_timestamp($t0_us / 1e6) and ts >= to_timestamp($t0_us / 1e6) - interval 1 day
  and type = 'counter' and list_contains($targets, target)
group by all
"""
