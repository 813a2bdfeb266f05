-- one row per target × counter-like series × pair of consecutive samples: how much the counter
-- grew over that scrape interval. Counter-like: counters, and the _bucket, _sum and _count
-- samples of histograms and summaries (each bucket `le` is its own series).
-- Prometheus's reset rule: when the value drops, the counter restarted from zero (the exporter
-- restarted), so the increase is the new value itself: never negative, no spike.
-- A macro for the reason given in canonical_metric_samples.sql; the view is
-- sql/views/metric_counter_increases.sql.
CREATE OR REPLACE MACRO counter_increases() AS TABLE
with counter_samples as (
    select *
    from canonical_metric_samples()
    where type = 'counter'
        or (type in ('histogram', 'summary')
            and metric in (family || '_bucket', family || '_sum', family || '_count'))
),

pairs as (
    -- family is in the partition (it is fixed by metric) so that filters on it reach the scan
    select
        target, metric, family, type, series_key, le, labels,
        lag(ts) over series_in_time as interval_start,
        ts as interval_end,
        lag(value) over series_in_time as start_value,
        value as end_value
    from counter_samples
    window series_in_time as (partition by target, family, metric, series_key, le order by ts)
),

increases as (
    select
        *,
        date_diff('microsecond', interval_start, interval_end) / 1e6 as interval_s,
        end_value < start_value as reset,
        case when end_value < start_value then end_value else end_value - start_value end
            as increase
    from pairs
    where interval_start is not null
),

final as (
    select
        target, metric, family, type, series_key, le, labels,
        interval_start, interval_end, interval_s,
        start_value, end_value, reset, increase,
        increase / nullif(interval_s, 0) as rate_per_s
    from increases
)

select * from final;
