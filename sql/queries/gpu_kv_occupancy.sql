-- one row per deployment x 1 % KV-cache usage bucket: the replica-seconds spent at that usage
-- over the hours [$start, $end) and their share of the deployment's covered time (the
-- occupancy distribution; cache_efficiency.kv_usage_hist_s summed). The bucket is
-- [kv_usage, kv_usage_to). Deployments are selected as in gpu_by_deployment. Buckets above the
-- highest one any selected deployment reached are left out (from 10 % up), so a cache that
-- never fills is drawn at a readable scale.
with selected as (
    select distinct deployment
    from deployment_replicas
    where
        -- deployments have no team, app or route: those filters do not narrow them
        global_filter(environment, null, null, null, model, $environment, null, null, null, $model)
),

buckets as (
    select deployment, bucket, sum(seconds) as seconds
    from (
        select deployment, unnest(range(100)) as bucket, unnest(kv_usage_hist_s) as seconds
        from cache_efficiency
        where
            hour >= $start and hour < $end
            and kv_usage_hist_s is not null
            and (
                ($environment is null and $model is null)
                or deployment in (select deployment from selected)
            )
    )
    group by deployment, bucket
),

shown as (
    -- the highest bucket with time in it (every deployment is drawn up to the same one)
    select greatest(9, max(bucket) filter (where seconds > 0)) as top_bucket from buckets
),

final as (
    select
        deployment,
        bucket / 100 as kv_usage,
        (bucket + 1) / 100 as kv_usage_to,
        seconds,
        -- (the buckets left out hold no time, so the share is of all the covered time)
        seconds / nullif(sum(seconds) over (partition by deployment), 0) as time_share
    from buckets
    where bucket <= (select top_bucket from shown)
)

select * from final
order by deployment, kv_usage
