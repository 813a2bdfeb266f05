-- one row per target × histogram series (labels without le): the q-quantile of the
-- observations of histogram metric_family (its canonical family name, e.g.
-- 'vllm:e2e_request_latency_seconds') made in the scrape intervals that end in
-- (start_ts, end_ts]; like PromQL's histogram_quantile(q, increase(family_bucket[window])),
-- without extrapolation to the window edges. Rules: sql/macros/histogram_bucket_quantiles.sql.
-- Call: select * from histogram_quantile_over(?, 0.95, ?, ?)
CREATE OR REPLACE MACRO histogram_quantile_over(metric_family, q, start_ts, end_ts) AS TABLE
with quantiles as (
    select * from histogram_bucket_quantiles(metric_family, [q], start_ts, end_ts, false)
),

final as (
    select
        target, family, series_key, labels,
        window_start, window_end,
        q as q,  -- a bare q is the macro argument; the alias names the column
        quantile, observations
    from quantiles
)

select * from final;
