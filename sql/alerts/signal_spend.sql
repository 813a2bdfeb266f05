-- one row per hour x environment x team x app x route x workflow x model x deployment: spend
-- (cost_configured: each deployment's own idle policy, as budgets count it) in the hours
-- [$window_hour, $end) and in the same hours of the week in the $weeks weeks before them, for
-- the spend_spike alert kind; ledger_hour is true on hours where the ledger has any spend row
-- at all (a week the ledger did not yet cover is no baseline, not a zero one).
with spend as (
    select *
    from mart_spend_hourly
    where hour >= $window_hour::timestamptz - to_days(7 * $weeks::integer)
        and hour < $end::timestamptz
        and (
            hour >= $window_hour::timestamptz
            or (
                (epoch(hour)::bigint - epoch($window_hour::timestamptz)::bigint) % 604800
                + 604800
            ) % 604800 < $span_s::bigint
        )
),

final as (
    select
        hour, environment, team, app, route, workflow, model, deployment,
        sum(cost_configured) as spend
    from spend
    group by all
)

select * from final
