-- one row per route x stage: count, mean and p50/p95/p99 of the latencies in the hours
-- [$start, $end) of the requests and service calls the filters select (environment, app,
-- route, model; retrieval and tool calls have no model, so a model filter leaves them out)
-- The histograms of mart_latency_buckets merged over the range, the apps and the models, with
-- the rule of sql/macros/latency_percentiles_over.sql (nearest rank; the bucket holding the
-- rank answers 2·lo·hi / (lo + hi) kept inside the values it holds; within 2.4 %, see
-- docs/efficiency.md). That macro groups by environment x app x route and takes no filters; a
-- test checks that the two agree where a route has one app and one environment.
with buckets as (
    select
        coalesce(route, '(none)') as route, stage, bucket,
        cast(sum(count) as bigint) as count,
        sum(sum_s) as sum_s,
        min(min_s) as min_s,
        max(max_s) as max_s
    from mart_latency_buckets
    where
        hour >= $start and hour < $end
        -- the histograms have no team: a team filter leaves them all in
        and global_filter(
            environment, null, app, route, model, $environment, null, $app, $route, $model
        )
    group by all
),

represented as (
    select
        *,
        cast(sum(count) over by_bucket as bigint) as cumulative,
        cast(sum(count) over by_bucket - count as bigint) as below,
        cast(sum(count) over one_group as bigint) as total,
        sum(sum_s) over one_group as total_s,
        min(min_s) over one_group as group_min_s,
        max(max_s) over one_group as group_max_s,
        latency_bucket_value(bucket, min_s, max_s) as value_s
    from buckets
    window
        one_group as (partition by route, stage),
        by_bucket as (
            partition by route, stage order by bucket
            rows between unbounded preceding and current row
        )
),

ranked as (
    select
        r.*,
        q.q,
        greatest(1, ceil(q.q * r.total - 1e-9)) as rank
    from represented as r
    cross join (select unnest([0.5, 0.95, 0.99]) as q) as q
),

final as (
    select
        route, stage,
        -- the order stages happen in a request, for the chart
        list_position(
            ['queue', 'retrieval', 'prefill', 'ttft', 'decode', 'tpot', 'tools', 'e2e'], stage
        ) as stage_order,
        any_value(total) as count,
        any_value(total_s) / any_value(total) as mean_s,
        any_value(group_min_s) as min_s,
        any_value(group_max_s) as max_s,
        max(value_s) filter (where q = 0.5 and below < rank and cumulative >= rank) as p50_s,
        max(value_s) filter (where q = 0.95 and below < rank and cumulative >= rank) as p95_s,
        max(value_s) filter (where q = 0.99 and below < rank and cumulative >= rank) as p99_s
    from ranked
    group by route, stage
)

select * from final
order by route, stage_order nulls last, stage
