-- one row per environment × app × route × stage: count, mean and p50/p95/p99 of the latencies
-- in the hours [start_ts, end_ts) (NULL: unbounded), merged from the histogram in
-- mart_latency_buckets, so any range is answered without raw spans.
-- The percentile is the nearest-rank one (the ceil(q × count)-th smallest value, as
-- quantile_disc): the bucket holding that rank answers with 2·lo·hi / (lo + hi), kept inside the
-- smallest and largest value the bucket really holds. Error bound (docs/efficiency.md): within
-- (10^(1/48) − 1) / (10^(1/48) + 1) = 2.4 % of the exact value between 1 ms and 1000 s; below
-- 1 ms off by less than 1 ms; at 1000 s and above, the largest value of the range.
-- Call: select * from latency_percentiles_over(?, ?)
CREATE OR REPLACE MACRO latency_percentiles_over(start_ts, end_ts) AS TABLE
with buckets as (
    select
        environment, app, route, stage, bucket,
        cast(sum(count) as bigint) as count,
        sum(sum_s) as sum_s,
        min(min_s) as min_s,
        max(max_s) as max_s
    from mart_latency_buckets
    where
        (start_ts is null or hour >= start_ts)
        and (end_ts is null or hour < end_ts)
    group by environment, app, route, stage, bucket
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
        one_group as (partition by environment, app, route, stage),
        by_bucket as (
            partition by environment, app, route, stage order by bucket
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
        environment, app, route, stage,
        any_value(total) as count,
        any_value(total_s) as sum_s,
        any_value(total_s) / any_value(total) as mean_s,
        any_value(group_min_s) as min_s,
        any_value(group_max_s) as max_s,
        max(value_s) filter (where q = 0.5 and below < rank and cumulative >= rank) as p50_s,
        max(value_s) filter (where q = 0.95 and below < rank and cumulative >= rank) as p95_s,
        max(value_s) filter (where q = 0.99 and below < rank and cumulative >= rank) as p99_s
    from ranked
    group by environment, app, route, stage
)

select * from final;
