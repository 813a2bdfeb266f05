-- one row per objective x route it matched: SLO attainment over the hours [$start, $end) from
-- slo_attainment_between (latency histograms against slo_targets): the share of the range's
-- requests within the target, whether it reaches the objective's percentile, and the days met
-- The percentile and target shown are those in effect on the range's last day with traffic
-- (each hour is judged by the version in effect then). Only the route filter applies: an
-- objective names its own app and environment.
with daily as (
    select *
    from slo_attainment_between($start, $end)
    where $route is null or route = $route
),

sums as (
    select
        objective, route,
        arg_max(stage, day) as stage,
        arg_max(percentile, day) as percentile,
        arg_max(target_s, day) as target_s,
        cast(sum(requests) as bigint) as requests,
        sum(within_target) as within_target,
        count(*) as days,
        count(*) filter (where met) as days_met,
        max(observed_s) as worst_day_observed_s
    from daily
    group by objective, route
),

final as (
    select
        *,
        concat(objective, ' · ', route) as label,
        within_target / nullif(requests, 0) as attained_share,
        within_target / nullif(requests, 0) >= percentile as met
    from sums
)

select * from final
order by met, attained_share - percentile, objective, route
