-- one row per deployment: GPU time, DCGM utilization beside the estimator's usage share and
-- tokens per GPU-hour, KV-cache occupancy (mean, p50, p90, max), KV- and compute-bound
-- waiting, preemptions per 1k requests, prefix-cache hit rate and prefill cost saved, cost per
-- 1M prompt and generation tokens, usage and idle cost, over the hours [$start, $end); of the
-- total cost, what is estimated (busy hours with no scrape: estimated_h) and the busy hours
-- nothing could price (unpriced_h; docs/cost-model.md, "Coverage")
-- From cache_efficiency (formulas: docs/efficiency.md), rolled up by summing and dividing again.
-- The environment and model filters select deployments (deployment_replicas); the marts have
-- no team, app or route. p50/p90 come from the summed 1 % histogram: the exact time-weighted
-- percentile over the range's replica-hours, rounded down to a whole percent.
with selected as (
    select distinct deployment
    from deployment_replicas
    where
        -- deployments have no team, app or route: those filters do not narrow them
        global_filter(environment, null, null, null, model, $environment, null, null, null, $model)
),

hours as (
    select *
    from cache_efficiency
    where
        hour >= $start and hour < $end
        and (
            ($environment is null and $model is null)
            or deployment in (select deployment from selected)
        )
),

kv_buckets as (
    select deployment, bucket, sum(seconds) as seconds
    from (
        select deployment, unnest(range(100)) as bucket, unnest(kv_usage_hist_s) as seconds
        from hours
        where kv_usage_hist_s is not null
    )
    group by deployment, bucket
),

kv_cumulative as (
    select
        *,
        sum(seconds) over by_bucket as cumulative_s,
        sum(seconds) over by_bucket - seconds as below_s,
        sum(seconds) over (partition by deployment) as total_s
    from kv_buckets
    window by_bucket as (
        partition by deployment order by bucket
        rows between unbounded preceding and current row
    )
),

kv_percentiles as (
    select
        deployment,
        max(bucket / 100) filter (
            where seconds > 0
                and below_s < 0.5 * total_s - 1e-9 and cumulative_s >= 0.5 * total_s - 1e-9
        ) as kv_usage_p50,
        max(bucket / 100) filter (
            where seconds > 0
                and below_s < 0.9 * total_s - 1e-9 and cumulative_s >= 0.9 * total_s - 1e-9
        ) as kv_usage_p90
    from kv_cumulative
    group by deployment
),

sums as (
    select
        deployment,
        sum(gpu_s) / 3600 as gpu_hours,
        sum(gpu_util_mean * dcgm_gpus) / nullif(sum(dcgm_gpus), 0) as gpu_util,
        sum(usage_gpu_s) / nullif(sum(gpu_s), 0) as usage_share,
        3600 * (coalesce(sum(prompt_tokens), 0) + coalesce(sum(generation_tokens), 0))
            / nullif(sum(gpu_s), 0) as tokens_per_gpu_hour,
        3600 * sum(generation_tokens) / nullif(sum(gpu_s), 0) as generation_tokens_per_gpu_hour,
        sum(kv_usage_mean * covered_s) / nullif(sum(covered_s), 0) as kv_usage_mean,
        max(kv_usage_max) as kv_usage_max,
        sum(kv_bound_s) / 3600 as kv_bound_h,
        sum(compute_bound_s) / 3600 as compute_bound_h,
        sum(requests_finished) as requests_finished,
        sum(preemptions) as preemptions,
        1000 * sum(preemptions) / nullif(sum(requests_finished), 0) as preemptions_per_1k,
        sum(prefix_hits) / nullif(sum(prefix_queries), 0) as prefix_hit_rate,
        coalesce(sum(prefill_cost_saved), 0) as prefill_cost_saved,
        1e6 * sum(prefill_cost) / nullif(sum(input_tokens), 0) as cost_per_1m_prompt_tokens,
        1e6 * sum(decode_cost) / nullif(sum(output_tokens), 0) as cost_per_1m_generation_tokens,
        coalesce(sum(usage_cost), 0) as usage_cost,
        coalesce(sum(idle_cost), 0) as idle_cost,
        coalesce(sum(total_cost), 0) as total_cost,
        coalesce(sum(est_cost), 0) as estimated_cost,
        coalesce(sum(est_s), 0) / 3600 as estimated_h,
        coalesce(sum(unpriced_s), 0) / 3600 as unpriced_h
    from hours
    group by deployment
),

final as (
    select
        s.deployment, s.gpu_hours, s.gpu_util, s.usage_share, s.tokens_per_gpu_hour,
        s.generation_tokens_per_gpu_hour,
        s.kv_usage_mean, p.kv_usage_p50, p.kv_usage_p90, s.kv_usage_max,
        s.kv_bound_h, s.compute_bound_h,
        s.requests_finished, s.preemptions, s.preemptions_per_1k,
        s.prefix_hit_rate, s.prefill_cost_saved,
        s.cost_per_1m_prompt_tokens, s.cost_per_1m_generation_tokens,
        s.usage_cost, s.idle_cost, s.total_cost, s.estimated_cost, s.estimated_h, s.unpriced_h
    from sums as s
    left join kv_percentiles as p on p.deployment = s.deployment
)

select * from final
order by deployment
