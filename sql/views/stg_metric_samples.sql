-- one row per sample (target × canonical metric × label set × ts), renamed vLLM metrics under
-- their current name; exported_metric keeps the name as scraped.
-- The logic lives in sql/macros/canonical_metric_samples.sql (macros cannot read views).
with canonical as (
    select * from canonical_metric_samples()
),

final as (
    select
        ts, target, metric, family, type, labels, series_key, le, value, exported_metric
    from canonical
)

select * from final
