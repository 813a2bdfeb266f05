-- one row per hour × vLLM replica: prefix-cache hit rate from vLLM's counters, preemptions per
-- 1k finished requests, KV-cache occupancy (time-weighted) and KV-bound vs compute-bound
-- waiting, from mart_cache_hourly (docs/efficiency.md).
with cache as (
    select * from mart_cache_hourly
),

final as (
    select
        hour, replica, deployment,
        prefix_queries, prefix_hits,
        prefix_hits / nullif(prefix_queries, 0) as prefix_hit_rate,
        requests_finished, preemptions,
        1000 * preemptions / nullif(requests_finished, 0) as preemptions_per_1k,
        prompt_tokens, generation_tokens,
        samples, covered_s,
        kv_usage_mean, kv_usage_p50, kv_usage_p90, kv_usage_max, kv_usage_hist_s,
        kv_high_s, waiting_s, kv_bound_s, compute_bound_s,
        waiting_s - kv_bound_s - compute_bound_s as waiting_unclassified_s,
        running_mean, waiting_mean
    from cache
)

select * from final
