-- one row per key of $dim: spend in [$start, $end) against the period of the same length just
-- before it, with the change in spend, in requests and in cost per request (what moved: traffic
-- or unit cost)
with periods as (
    select
        coalesce(
            case $dim
                when 'team' then team
                when 'app' then app
                when 'route' then route
                when 'model' then model
                when 'workflow' then workflow
                when 'deployment' then deployment
                when 'stage' then stage
            end,
            case when stage = 'idle' then '(idle)' else '(none)' end
        ) as key,
        hour >= $start as current,
        cost,
        requests
    from spend_filtered(
        $start - ($end - $start), $end, $policy, $environment, $team, $app, $route, $model
    )
),

sums as (
    select
        key,
        coalesce(sum(cost) filter (where current), 0) as cost,
        coalesce(sum(cost) filter (where not current), 0) as cost_before,
        coalesce(sum(requests) filter (where current), 0) as requests,
        coalesce(sum(requests) filter (where not current), 0) as requests_before
    from periods
    group by key
)

select
    *,
    cost - cost_before as delta,
    cost / nullif(requests, 0) as cost_per_request,
    cost_before / nullif(requests_before, 0) as cost_per_request_before
from sums
order by abs(cost - cost_before) desc
limit 10
