-- one row per target × counter-like series × pair of consecutive samples: increase over the
-- interval with Prometheus's counter-reset rule, and the per-second rate.
-- The logic lives in sql/macros/counter_increases.sql (macros cannot read views).
with increases as (
    select * from counter_increases()
),

final as (
    select
        target, metric, family, type, series_key, le, labels,
        interval_start, interval_end, interval_s,
        start_value, end_value, reset, increase, rate_per_s
    from increases
)

select * from final
