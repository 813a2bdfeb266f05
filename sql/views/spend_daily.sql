-- one row per day x idle_policy x environment x app x team x route x workflow x model x
-- deployment x stage (UTC days). Filter on one idle_policy; see spend_hourly.
with hourly as (
    select * from spend_hourly
),

final as (
    select
        date_trunc('day', hour) as day,
        idle_policy, environment, app, team, route, workflow, model, deployment, stage,
        sum(requests) as requests,
        sum(failed_requests) as failed_requests,
        sum(input_tokens) as input_tokens,
        sum(output_tokens) as output_tokens,
        sum(cost) as cost
    from hourly
    group by all
)

select * from final
