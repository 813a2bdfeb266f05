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
from spend_filtered($start, $end, $policy, $environment, $team, $app, $route, $model)
group by all
having sum(cost) <> 0 or sum(requests) <> 0
order by cost desc
