-- one row per bucket ($bucket: hour or day, UTC) with spend or latency in [$start, $end): spend
-- under idle policy $policy and requests (spend_hourly), and the p95 time to first token of the
-- successful requests (merged latency histograms, as overview_latency.sql), matching the filters
with spend as (
    select
        time_bucket(case when $bucket = 'hour' then interval 1 hour else interval 1 day end, hour)
            as bucket,
        sum(cost) as cost,
        cast(sum(requests) as bigint) as requests
    from spend_hourly
    where
        idle_policy = $policy and hour >= $start and hour < $end
        and global_filter(
            environment, team, app, route, model, $environment, $team, $app, $route, $model
        )
    group by 1
),

team_routes as (
    select distinct environment, app, route
    from mart_spend_hourly
    where $team is not null and team = $team and hour >= $start and hour < $end
),

buckets as (
    select
        time_bucket(
            case when $bucket = 'hour' then interval 1 hour else interval 1 day end, b.hour
        ) as time_bucket,
        b.bucket,
        cast(sum(b.count) as bigint) as count,
        min(b.min_s) as min_s,
        max(b.max_s) as max_s
    from mart_latency_buckets as b
    where
        b.hour >= $start and b.hour < $end and b.stage = 'ttft'
        and global_filter(
            b.environment, null, b.app, b.route, b.model, $environment, null, $app, $route, $model
        )
        and ($team is null or exists (
            select 1 from team_routes as t
            where
                t.environment is not distinct from b.environment
                and t.app is not distinct from b.app
                and t.route is not distinct from b.route
        ))
    group by 1, 2
),

represented as (
    select
        time_bucket,
        cast(sum(count) over by_bucket as bigint) as cumulative,
        cast(sum(count) over by_bucket - count as bigint) as below,
        cast(sum(count) over (partition by time_bucket) as bigint) as total,
        latency_bucket_value(bucket, min_s, max_s) as value_s
    from buckets
    window by_bucket as (
        partition by time_bucket order by bucket
        rows between unbounded preceding and current row
    )
),

ttft as (
    select
        time_bucket as bucket,
        max(value_s) filter (
            where below < greatest(1, ceil(0.95 * total - 1e-9))
                and cumulative >= greatest(1, ceil(0.95 * total - 1e-9))
        ) as ttft_p95_s
    from represented
    group by time_bucket
),

final as (
    select
        coalesce(s.bucket, t.bucket) as bucket,
        coalesce(s.cost, 0) as cost,
        coalesce(s.requests, 0) as requests,
        t.ttft_p95_s
    from spend as s
    full outer join ttft as t on t.bucket = s.bucket
)

select * from final
order by bucket
