-- one row per hour × deployment: prefix-cache hit rate (vLLM counters and span token counts),
-- prefill cost saved by cache hits, preemptions per 1k requests, KV-cache occupancy and
-- KV-bound vs compute-bound waiting, cost per 1M prompt and generation tokens, tokens per
-- GPU-hour, estimator usage share beside DCGM GPU utilization, and idle cost. Reads the marts
-- mart_cache_hourly, mart_gpu_hourly, mart_cache_by_app and mart_replica_hours only.
-- Formulas: docs/efficiency.md and docs/cost-model.md ("Efficiency").
with replicas as (
    select
        hour, deployment,
        count(*) as replicas,
        sum(prefix_queries) as prefix_queries,
        sum(prefix_hits) as prefix_hits,
        sum(preemptions) as preemptions,
        sum(requests_finished) as requests_finished,
        sum(prompt_tokens) as prompt_tokens,
        sum(generation_tokens) as generation_tokens,
        sum(covered_s) as covered_s,
        sum(kv_usage_mean * covered_s) / nullif(sum(covered_s), 0) as kv_usage_mean,
        max(kv_usage_max) as kv_usage_max,
        sum(kv_high_s) as kv_high_s,
        sum(waiting_s) as waiting_s,
        sum(kv_bound_s) as kv_bound_s,
        sum(compute_bound_s) as compute_bound_s
    from mart_cache_hourly
    group by hour, deployment
),

kv_buckets as (
    -- the replicas' KV-usage histograms (seconds per 1 % bucket) summed per deployment-hour
    select hour, deployment, bucket, sum(seconds) as seconds
    from (
        select
            hour, deployment,
            unnest(range(100)) as bucket,
            unnest(kv_usage_hist_s) as seconds
        from mart_cache_hourly
    )
    group by hour, deployment, bucket
),

kv_cumulative as (
    select
        *,
        sum(seconds) over by_bucket as cumulative_s,
        sum(seconds) over by_bucket - seconds as below_s,
        sum(seconds) over (partition by hour, deployment) as total_s
    from kv_buckets
    window by_bucket as (
        partition by hour, deployment order by bucket
        rows between unbounded preceding and current row
    )
),

kv_percentiles as (
    -- the 1 % bucket where the cumulative seconds reach q × total: its lower edge is the exact
    -- time-weighted percentile of the deployment's replicas rounded down to a whole percent
    select
        hour, deployment,
        list(seconds order by bucket) as kv_usage_hist_s,
        max(bucket / 100) filter (
            where seconds > 0
                and below_s < 0.5 * total_s - 1e-9 and cumulative_s >= 0.5 * total_s - 1e-9
        ) as kv_usage_p50,
        max(bucket / 100) filter (
            where seconds > 0
                and below_s < 0.9 * total_s - 1e-9 and cumulative_s >= 0.9 * total_s - 1e-9
        ) as kv_usage_p90
    from kv_cumulative
    group by hour, deployment
),

gpus as (
    select
        hour, deployment,
        sum(gpus) as dcgm_gpus,
        sum(gpu_util_mean * gpu_covered_s) / nullif(sum(gpu_covered_s), 0) as gpu_util_mean
    from mart_gpu_hourly
    group by hour, deployment
),

requests as (
    select
        hour, deployment,
        cast(sum(requests) as bigint) as requests,
        cast(sum(input_tokens) as bigint) as input_tokens,
        cast(sum(cache_reported_input_tokens) as bigint) as cache_reported_input_tokens,
        cast(sum(cached_input_tokens) as bigint) as cached_input_tokens,
        cast(sum(uncached_input_tokens) as bigint) as uncached_input_tokens,
        cast(sum(output_tokens) as bigint) as output_tokens,
        sum(prefill_cost) as prefill_cost,
        sum(decode_cost) as decode_cost,
        sum(prefill_gpu_s) as prefill_gpu_s,
        sum(decode_gpu_s) as decode_gpu_s
    from mart_cache_by_app
    where hosting = 'self_hosted' and deployment is not null
    group by hour, deployment
),

replica_costs as (
    select
        hour, deployment,
        sum(gpu_s) as gpu_s,
        sum(usage_gpu_s) as usage_gpu_s,
        sum(total_cost) as total_cost,
        sum(usage_cost) as usage_cost,
        sum(idle_cost) as idle_cost,
        sum(est_s) as est_s,
        sum(est_cost) as est_cost,
        sum(unpriced_s) as unpriced_s
    from mart_replica_hours
    group by hour, deployment
),

keys as (
    select hour, deployment from replicas
    union
    select hour, deployment from gpus
    union
    select hour, deployment from requests
    union
    select hour, deployment from replica_costs
),

final as (
    select
        k.hour,
        k.deployment,
        coalesce(r.replicas, 0) as replicas,
        -- prefix cache, from vLLM's counters
        r.prefix_queries,
        r.prefix_hits,
        r.prefix_hits / nullif(r.prefix_queries, 0) as prefix_hit_rate,
        -- prefix cache and costs, from the requests (spans)
        q.requests,
        q.input_tokens,
        q.cached_input_tokens,
        q.cached_input_tokens / nullif(q.cache_reported_input_tokens, 0) as span_hit_rate,
        q.uncached_input_tokens,
        q.output_tokens,
        q.prefill_cost,
        q.decode_cost,
        q.prefill_gpu_s,
        q.decode_gpu_s,
        q.prefill_cost / nullif(q.uncached_input_tokens, 0) as prefill_cost_per_uncached_token,
        q.cached_input_tokens * q.prefill_cost / nullif(q.uncached_input_tokens, 0)
            as prefill_cost_saved,
        1e6 * q.prefill_cost / nullif(q.input_tokens, 0) as cost_per_1m_prompt_tokens,
        1e6 * q.decode_cost / nullif(q.output_tokens, 0) as cost_per_1m_generation_tokens,
        -- preemptions and KV cache, from vLLM's counters and gauges
        r.requests_finished,
        r.preemptions,
        1000 * r.preemptions / nullif(r.requests_finished, 0) as preemptions_per_1k,
        r.prompt_tokens,
        r.generation_tokens,
        r.covered_s,
        r.kv_usage_mean,
        p.kv_usage_p50,
        p.kv_usage_p90,
        r.kv_usage_max,
        p.kv_usage_hist_s,
        r.kv_high_s,
        r.waiting_s,
        r.kv_bound_s,
        r.compute_bound_s,
        -- GPU time and cost (mart_replica_hours), DCGM utilization beside the useful work
        c.gpu_s,
        c.usage_gpu_s,
        c.usage_gpu_s / nullif(c.gpu_s, 0) as usage_share,
        g.gpu_util_mean,
        g.dcgm_gpus,
        3600 * (r.prompt_tokens + r.generation_tokens) / nullif(c.gpu_s, 0)
            as tokens_per_gpu_hour,
        3600 * r.generation_tokens / nullif(c.gpu_s, 0) as generation_tokens_per_gpu_hour,
        c.total_cost,
        c.usage_cost,
        c.idle_cost,
        -- busy time with no scrape behind it: costed from size and price (part of total_cost,
        -- not of gpu_s), or not costable (docs/cost-model.md, "Coverage")
        c.est_s,
        c.est_cost,
        c.unpriced_s
    from keys as k
    left join replicas as r on r.hour = k.hour and r.deployment = k.deployment
    left join kv_percentiles as p on p.hour = k.hour and p.deployment = k.deployment
    left join gpus as g on g.hour = k.hour and g.deployment = k.deployment
    left join requests as q on q.hour = k.hour and q.deployment = k.deployment
    left join replica_costs as c on c.hour = k.hour and c.deployment = k.deployment
)

select * from final
