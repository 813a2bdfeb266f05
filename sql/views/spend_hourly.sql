-- one row per hour x idle_policy x environment x app x team x route x workflow x model x
-- deployment x stage. Pick one idle_policy ('separate', 'usage', 'even', 'configured'): for
-- each, sum(cost) over any slice plus the unshared idle rows (app null) is the total spend.
with spend as (
    select * from mart_spend_hourly
),

final as (
    select
        hour, idle_policy, environment, app, team, route, workflow, model, deployment, stage,
        requests, failed_requests, input_tokens, output_tokens, cost
    from spend
    unpivot (
        cost for idle_policy in (
            cost_separate as 'separate',
            cost_usage as 'usage',
            cost_even as 'even',
            cost_configured as 'configured'
        )
    )
)

select * from final
