-- one row per team x app x route x stage: spend in [$start, $end) under idle policy $policy,
-- for the treemap / sunburst (unshared idle: team '(idle)')
select
    coalesce(team, case when stage = 'idle' and app is null then '(idle)' else '(no team)' end)
        as team,
    coalesce(app, case when stage = 'idle' then '(idle)' else '(no app)' end) as app,
    coalesce(route, '(no route)') as route,
    stage,
    sum(cost) as cost,
    sum(requests) as requests
from spend_hourly
where
    idle_policy = $policy and hour >= $start and hour < $end
    and ($environment is null or environment = $environment)
    and ($team is null or team = $team)
    and ($app is null or app = $app)
    and ($route is null or route = $route)
    and ($model is null or model = $model)
group by all
having sum(cost) <> 0 or sum(requests) <> 0
order by cost desc
