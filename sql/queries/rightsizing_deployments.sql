-- one row per selected deployment: what right-sizing needs to know of it (models/rightsizing.py)
-- -- GPUs per replica, tensor parallelism, its model and GPU type (NULL when not known or when
-- its replicas disagree: then no step-time model is built for it) and the range's $/GPU-hour
-- (GPU cost of scraped time over priced GPU-hours of its replicas in mart_replica_hours, as in
-- replica_costs.sql; NULL when unpriced). The environment and model filters select deployments.
with selected as (
    select replica, deployment, gpus, tensor_parallel, model, gpu_type
    from deployment_replicas
    where
        -- deployments have no team, app or route: those filters do not narrow them
        global_filter(environment, null, null, null, model, $environment, null, null, null, $model)
),

costs as (
    select
        deployment,
        sum(total_cost - est_cost) filter (where priced) as priced_cost,
        sum(gpu_s) filter (where priced) / 3600 as priced_gpu_hours
    from mart_replica_hours
    where hour >= $start and hour < $end and replica in (select replica from selected)
    group by deployment
),

deployments as (
    select
        deployment,
        count(*) as replicas,
        max(gpus) as gpus_per_replica,
        max(tensor_parallel) as tensor_parallel,
        case when count(distinct model) = 1 and count(model) = count(*) then any_value(model) end
            as model,
        case
            when count(distinct gpu_type) = 1 and count(gpu_type) = count(*)
                then any_value(gpu_type)
        end as gpu_type
    from selected
    group by deployment
),

final as (
    select
        d.deployment,
        d.replicas,
        d.gpus_per_replica,
        d.tensor_parallel,
        d.model,
        d.gpu_type,
        c.priced_cost / nullif(c.priced_gpu_hours, 0) as price_per_gpu_hour
    from deployments as d
    left join costs as c on c.deployment = d.deployment
)

select * from final
order by deployment
