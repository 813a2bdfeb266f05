-- one row per day (UTC) × objective × route its pattern matched: SLO attainment from the
-- latency histograms and the editable targets in slo_targets (share within target, met, the
-- observed percentile). For a range of days use slo_attainment_between(start, end); the
-- rules are in sql/macros/slo_attainment_between.sql and docs/efficiency.md.
with attainment as (
    select * from slo_attainment_between(null, null)
),

final as (
    select
        day, objective, route, stage, app, environment, percentile, target_s,
        requests, within_target, attained_share, met, observed_s, hours
    from attainment
)

select * from final
