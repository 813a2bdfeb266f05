-- one row per target × histogram series (labels without le) × window × q: Prometheus's
-- histogram_quantile over the bucket increases of the window (promql/quantile.go):
-- - buckets sorted by upper bound; counts made monotonic (a bucket never counts fewer than the
--   one below it); no +Inf bucket, or no observations in the window: quantile NULL (NaN there);
-- - rank = q × observations (the +Inf bucket's count); the answer lies in the first bucket whose
--   cumulative count reaches the rank, interpolated linearly inside it, the first bucket
--   starting at 0 (or returning its bound when that is <= 0);
-- - a rank beyond every finite bucket returns the upper bound of the last finite bucket;
-- - q < 0 gives -Infinity, q > 1 gives +Infinity.
-- Arguments: metric_family (NULL: every histogram), quantiles (a list of q), start_ts, end_ts
-- (NULL: unbounded; an interval belongs to the window it ends in: (start_ts, end_ts]), and
-- per_interval (true: one window per scrape interval; false: one window (start_ts, end_ts]).
-- The public faces are histogram_quantile_over (a macro) and the view
-- metric_histogram_quantiles; file-name order matters (see canonical_metric_samples.sql).
CREATE OR REPLACE MACRO histogram_bucket_quantiles(
    metric_family, quantiles, start_ts, end_ts, per_interval
) AS TABLE
with bucket_increases as (
    select *
    from counter_increases()
    where le is not null
        and (metric_family is null or family = metric_family)
        and (start_ts is null or interval_end > start_ts)
        and (end_ts is null or interval_end <= end_ts)
),

buckets as (
    select
        target, family, series_key,
        case when per_interval then interval_start else start_ts end as window_start,
        case when per_interval then interval_end else end_ts end as window_end,
        le,
        sum(increase) as bucket_count,
        any_value(labels) as labels
    from bucket_increases
    group by all
),

monotonic as (
    select
        *,
        max(bucket_count) over (
            partition by target, family, series_key, window_start, window_end order by le
        ) as cumulative
    from buckets
),

framed as (
    -- 1.7976931348623157e308 is the largest finite double: le above it is +Inf (portable test)
    select
        *,
        lag(le) over by_bound as lower_bound,
        lag(cumulative) over by_bound as below,
        max(case when le > 1.7976931348623157e308 then cumulative end) over one_series
            as observations,
        max(case when le <= 1.7976931348623157e308 then le end) over one_series
            as last_finite_le
    from monotonic
    window
        one_series as (partition by target, family, series_key, window_start, window_end),
        by_bound as (
            partition by target, family, series_key, window_start, window_end order by le
        )
),

ranked as (
    select
        f.*,
        l.q,
        l.q * f.observations as rank,
        -- the bucket the rank falls in: the first finite one whose cumulative count reaches it
        f.le <= 1.7976931348623157e308
            and f.cumulative >= l.q * f.observations
            and (f.below is null or f.below < l.q * f.observations) as holds_rank
    from framed as f
    cross join (select cast(unnest(quantiles) as double) as q) as l
),

interpolated as (
    select
        *,
        case
            when not holds_rank then null
            when lower_bound is null and le <= 0 then le
            else coalesce(lower_bound, 0) + (le - coalesce(lower_bound, 0))
                * (rank - coalesce(below, 0)) / nullif(cumulative - coalesce(below, 0), 0)
        end as in_bucket
    from ranked
),

final as (
    select
        target, family, series_key,
        map_from_entries(list_filter(map_entries(any_value(labels)), lambda e: e.key <> 'le'))
            as labels,
        window_start, window_end, q,
        case
            when q < 0 then cast('-Infinity' as double)
            when q > 1 then cast('Infinity' as double)
            when coalesce(max(observations), 0) = 0 then null
            when count(case when holds_rank then 1 end) = 0 then max(last_finite_le)
            else max(in_bucket)
        end as quantile,
        max(observations) as observations
    from interpolated
    group by target, family, series_key, window_start, window_end, q
)

select * from final;
