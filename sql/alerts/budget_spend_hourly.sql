-- one row per hour x environment x team x app x route x workflow x model x deployment: the
-- spend of hours [$start, $end) under each idle policy (summed over stages), for budget status
-- (ledger/budget_status.py filters the rows by each budget's scope, so one read serves every
-- budget). Idle rows carry no app/team/route/workflow under `separate` (the idle nobody
-- shares), so a scope on those dimensions leaves that idle out; see docs/budgets.md.
with spend as (
    select *
    from mart_spend_hourly
    where hour >= $start::timestamptz and hour < $end::timestamptz
),

final as (
    select
        hour, environment, team, app, route, workflow, model, deployment,
        sum(cost_separate) as cost_separate,
        sum(cost_usage) as cost_usage,
        sum(cost_even) as cost_even,
        sum(cost_configured) as cost_configured
    from spend
    group by all
)

select * from final
