-- one row per day (UTC) × objective × route its pattern matched, over the hours
-- [start_ts, end_ts) (NULL: unbounded; pass whole days for whole-day rows): the share of
-- requests (or service calls) of the objective's stage that finished within its target,
-- whether that share reaches the objective's percentile (met), and the observed percentile.
-- Reads the latency histograms (mart_latency_buckets) and the targets (slo_targets) at query
-- time, so an edited target applies at once, no refresh needed. Each hour is judged by the
-- version of the objective in effect at its start; percentile and target_s show the version
-- in effect at the day's last hour with traffic. Observations in the histogram bucket
-- (4.9 % wide) that holds the target count as within it pro rata between the bucket's smallest
-- and largest value; the observed percentile is within 2.4 % (docs/efficiency.md).
-- The view slo_attainment is this macro over all hours. Call:
-- select * from slo_attainment_between(?, ?) where not met
CREATE OR REPLACE MACRO slo_attainment_between(start_ts, end_ts) AS TABLE
with targets as (
    select
        *,
        lead(effective_from) over (partition by objective order by effective_from)
            as effective_to
    from slo_targets
),

matched as (
    select
        cast(b.hour at time zone 'UTC' as date) as day,
        t.objective, b.route, b.hour, t.target_id, b.bucket, b.count, b.min_s, b.max_s,
        case
            when b.max_s <= t.target_s then b.count
            when b.min_s > t.target_s then 0
            else b.count * (t.target_s - b.min_s) / (b.max_s - b.min_s)
        end as within_target
    from mart_latency_buckets as b
    inner join targets as t
        on
            b.stage = t.stage
            and b.route like t.route
            and (t.app is null or b.app = t.app)
            and (t.environment is null or b.environment = t.environment)
            and b.hour >= t.effective_from
            and (t.effective_to is null or b.hour < t.effective_to)
    where
        (start_ts is null or b.hour >= start_ts)
        and (end_ts is null or b.hour < end_ts)
),

daily as (
    select
        day, objective, route,
        arg_max(target_id, hour) as target_id,
        cast(sum(count) as bigint) as requests,
        sum(within_target) as within_target,
        count(distinct hour) as hours
    from matched
    group by day, objective, route
),

day_buckets as (
    select
        m.day, m.objective, m.route, m.bucket,
        cast(sum(m.count) as bigint) as count,
        min(m.min_s) as min_s,
        max(m.max_s) as max_s
    from matched as m
    group by m.day, m.objective, m.route, m.bucket
),

ranked as (
    select
        b.*,
        cast(sum(b.count) over by_bucket as bigint) as cumulative,
        cast(sum(b.count) over by_bucket - b.count as bigint) as below,
        greatest(1, ceil(t.percentile * d.requests - 1e-9)) as rank,
        latency_bucket_value(b.bucket, b.min_s, b.max_s) as value_s
    from day_buckets as b
    inner join daily as d on d.day = b.day and d.objective = b.objective and d.route = b.route
    inner join slo_targets as t on t.target_id = d.target_id
    window by_bucket as (
        partition by b.day, b.objective, b.route order by b.bucket
        rows between unbounded preceding and current row
    )
),

observed as (
    select day, objective, route, max(value_s) as observed_s
    from ranked
    where below < rank and cumulative >= rank
    group by day, objective, route
),

final as (
    select
        d.day, d.objective, d.route,
        t.stage, t.app, t.environment, t.percentile, t.target_s,
        d.requests, d.within_target,
        d.within_target / d.requests as attained_share,
        d.within_target / d.requests >= t.percentile as met,
        o.observed_s,
        d.hours
    from daily as d
    inner join slo_targets as t on t.target_id = d.target_id
    left join observed as o on o.day = d.day and o.objective = d.objective and o.route = d.route
)

select * from final;
