-- one row per vLLM scrape target (replica) with a KV-cache sample in [$start, $end): scrape
-- instants in the window, instants with KV-cache usage >= $occupancy while a request waited,
-- and the increase of vllm:num_preemptions_total over the window (resets counted as from zero),
-- for the kv_pressure alert kind. Names are the canonical ones (vllm:gpu_cache_usage_perc is
-- read as vllm:kv_cache_usage_perc).
with samples as (
    select ts, target, metric, series_key, value
    from canonical_metric_samples()
    where ts >= $start::timestamptz and ts < $end::timestamptz
        and metric in (
            'vllm:kv_cache_usage_perc', 'vllm:num_requests_waiting', 'vllm:num_preemptions_total'
        )
),

instants as (
    select
        target, ts,
        max(value) filter (where metric = 'vllm:kv_cache_usage_perc') as kv_usage,
        sum(value) filter (where metric = 'vllm:num_requests_waiting') as waiting
    from samples
    group by target, ts
),

pressure as (
    select
        target,
        count(*) filter (where kv_usage is not null) as instants,
        count(*) filter (where kv_usage >= $occupancy::double and waiting > 0) as pressed,
        max(kv_usage) as kv_usage_max
    from instants
    group by target
),

counter_steps as (
    select
        target,
        value - lag(value) over (partition by target, series_key order by ts) as step,
        value
    from samples
    where metric = 'vllm:num_preemptions_total'
),

preemptions as (
    select target, sum(case when step >= 0 then step else value end) as preemptions
    from counter_steps
    where step is not null
    group by target
),

deployments as (
    select target, any_value(deployment) as deployment
    from scrapes
    where ts >= $start::timestamptz and ts < $end::timestamptz
    group by target
),

final as (
    select
        p.target,
        coalesce(d.deployment, p.target) as deployment,
        p.instants, p.pressed, p.kv_usage_max,
        coalesce(c.preemptions, 0) as preemptions
    from pressure as p
    left join preemptions as c on c.target = p.target
    left join deployments as d on d.target = p.target
    where p.instants > 0
)

select * from final
