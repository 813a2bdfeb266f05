-- one row per stage (ttft, e2e) with requests: count, p50 and p95 over [$start, $end) of the
-- successful requests matching the filters, merged from the latency histograms
-- (mart_latency_buckets) like latency_percentiles_over: nearest rank, the bucket's 2·lo·hi/(lo+hi)
-- kept inside the values it holds (within 2.4 %, docs/efficiency.md). The histograms have no
-- team: a team filter keeps the environment × app × route combinations the team's requests used.
with team_routes as (
    select distinct environment, app, route
    from mart_spend_hourly
    where $team is not null and team = $team and hour >= $start and hour < $end
),

buckets as (
    select
        b.stage, b.bucket,
        cast(sum(b.count) as bigint) as count,
        min(b.min_s) as min_s,
        max(b.max_s) as max_s
    from mart_latency_buckets as b
    where
        b.hour >= $start and b.hour < $end and b.stage in ('ttft', 'e2e')
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
    group by b.stage, b.bucket
),

represented as (
    select
        stage,
        cast(sum(count) over by_bucket as bigint) as cumulative,
        cast(sum(count) over by_bucket - count as bigint) as below,
        cast(sum(count) over (partition by stage) as bigint) as total,
        latency_bucket_value(bucket, min_s, max_s) as value_s
    from buckets
    window by_bucket as (
        partition by stage order by bucket rows between unbounded preceding and current row
    )
),

ranked as (
    select r.*, q.q, greatest(1, ceil(q.q * r.total - 1e-9)) as rank
    from represented as r
    cross join (select unnest([0.5, 0.95]) as q) as q
),

final as (
    select
        stage,
        any_value(total) as count,
        max(value_s) filter (where q = 0.5 and below < rank and cumulative >= rank) as p50_s,
        max(value_s) filter (where q = 0.95 and below < rank and cumulative >= rank) as p95_s
    from ranked
    group by stage
)

select * from final
order by stage
