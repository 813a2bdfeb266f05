-- one row per hour x self-hosted deployment: the deployment's load (LLM requests that started
-- in the hour, every app; vLLM's mean running and waiting requests summed over its replicas;
-- KV-cache usage) beside the TTFT p95 of the requests the filters select, in [$start, $end)
-- TTFT is measured on successful requests only, as in mart_latency_hourly; the percentile is
-- the nearest-rank one (quantile_disc). Hours without a selected request are left out.
with requests as (
    select
        *,
        global_filter(
            environment, team, app, route, model, $environment, $team, $app, $route, $model
        )
        and not failed and isfinite(ttft_s) and ttft_s >= 0 as measured
    from mart_requests
    where hour >= $start and hour < $end and hosting = 'self_hosted' and deployment is not null
),

latency as (
    select
        hour, deployment,
        count(*) as requests,
        count(*) filter (where measured) as measured_requests,
        quantile_disc(ttft_s, 0.95) filter (where measured) as ttft_p95_s
    from requests
    group by hour, deployment
),

engines as (
    select
        hour, deployment,
        count(*) as replicas,
        sum(running_mean) as running_mean,
        sum(waiting_mean) as waiting_mean,
        sum(kv_usage_mean * covered_s) / nullif(sum(covered_s), 0) as kv_usage_mean
    from kv_cache_hourly
    where hour >= $start and hour < $end
    group by hour, deployment
),

final as (
    select
        l.hour, l.deployment, l.requests, l.measured_requests, l.ttft_p95_s,
        e.replicas, e.running_mean, e.waiting_mean, e.kv_usage_mean
    from latency as l
    left join engines as e on e.hour = l.hour and e.deployment = l.deployment
    where l.measured_requests > 0
)

select * from final
order by deployment, hour
