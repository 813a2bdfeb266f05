-- one row per target × histogram series (labels without le) × scrape interval: p50, p95 and
-- p99 of the observations made in that interval (NULL when there were none), by Prometheus's
-- histogram_quantile rule (sql/macros/histogram_bucket_quantiles.sql). For a longer window use
-- histogram_quantile_over(family, q, start_ts, end_ts).
with quantiles as (
    select * from histogram_bucket_quantiles(null, [0.5, 0.95, 0.99], null, null, true)
),

final as (
    select
        target, family, series_key,
        any_value(labels) as labels,
        window_start as interval_start,
        window_end as interval_end,
        max(observations) as observations,
        max(case when q = 0.5 then quantile end) as p50,
        max(case when q = 0.95 then quantile end) as p95,
        max(case when q = 0.99 then quantile end) as p99
    from quantiles
    group by target, family, series_key, window_start, window_end
)

select * from final
