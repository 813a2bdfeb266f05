-- one row: DCGM GPU utilization (time-weighted over GPU-seconds, mart_gpu_hourly) and the
-- ledger's busy share (GPU-seconds in prefill or decode ÷ GPU-seconds up, mart_replica_hours;
-- both over scraped up time only, so it is at most 1: docs/cost-model.md, "Coverage")
-- over [$start, $end), of every deployment, or with a filter set, of the deployments that served
-- the requests matching it
with served as (
    select distinct deployment
    from mart_spend_hourly
    where
        hour >= $start and hour < $end and deployment is not null and requests > 0
        and global_filter(
            environment, team, app, route, model, $environment, $team, $app, $route, $model
        )
),

unfiltered as (
    select
        $environment is null and $team is null and $app is null and $route is null
        and $model is null as everything
),

dcgm as (
    select
        sum(gpu_util_mean * gpu_covered_s) / nullif(sum(gpu_covered_s), 0) as gpu_util_mean,
        sum(gpu_covered_s) / 3600 as dcgm_gpu_hours
    from mart_gpu_hourly
    where
        hour >= $start and hour < $end and gpu_util_mean is not null
        and ((select everything from unfiltered) or deployment in (select deployment from served))
),

ledger as (
    select
        sum(usage_gpu_s) / nullif(sum(gpu_s), 0) as busy_share,
        sum(gpu_s) / 3600 as gpu_hours
    from mart_replica_hours
    where
        hour >= $start and hour < $end
        and ((select everything from unfiltered) or deployment in (select deployment from served))
),

final as (
    select d.gpu_util_mean, d.dcgm_gpu_hours, l.busy_share, l.gpu_hours
    from dcgm as d
    cross join ledger as l
)

select * from final
