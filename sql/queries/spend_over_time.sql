-- one row per bucket (hour or day) x key: spend in [$start, $end) under idle policy $policy,
-- keyed by $dim (team, app, route, model, workflow, deployment, stage or environment); the
-- unshared idle is its own key '(idle)'. Filters: NULL matches everything.
select
    time_bucket(case when $bucket = 'hour' then interval 1 hour else interval 1 day end, hour)
        as bucket,
    coalesce(
        case $dim
            when 'team' then team
            when 'app' then app
            when 'route' then route
            when 'model' then model
            when 'workflow' then workflow
            when 'deployment' then deployment
            when 'stage' then stage
            when 'environment' then environment
        end,
        case when stage = 'idle' then '(idle)' else '(none)' end
    ) as key,
    sum(cost) as cost,
    sum(requests) as requests
from spend_filtered($start, $end, $policy, $environment, $team, $app, $route, $model)
group by all
order by bucket, key
