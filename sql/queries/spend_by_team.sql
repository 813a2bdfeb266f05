-- one row per team: spend in [$start, $end) under idle policy $policy, the idle that policy
-- charges the team, and the idle it would carry if idle were shared by usage (whatever $policy
-- is) with that amount's share of all idle of the deployments in view (environment and model
-- filters apply; team, app and route do not, as idle belongs to no team until shared). Under
-- $policy the idle charged to no team is the row '(idle)'; under usage sharing, '(idle)' keeps
-- only the idle of hours with no usage to share it by. Invariant (no team/app/route filter):
-- sum(usage_idle) = all idle. Filters: NULL matches everything.
with chosen as (
    select
        coalesce(
            team, case when stage = 'idle' and app is null then '(idle)' else '(no team)' end
        ) as team,
        sum(cost) as cost,
        coalesce(sum(cost) filter (where stage = 'idle'), 0) as idle_cost,
        sum(requests) as requests
    from spend_filtered($start, $end, $policy, $environment, $team, $app, $route, $model)
    group by all
),

by_usage as (
    select
        coalesce(
            team, case when stage = 'idle' and app is null then '(idle)' else '(no team)' end
        ) as team,
        sum(cost) as usage_idle
    from spend_filtered($start, $end, 'usage', $environment, $team, $app, $route, $model)
    where stage = 'idle'
    group by all
),

all_idle as (
    select sum(cost) as idle
    from spend_filtered($start, $end, 'separate', $environment, null, null, null, $model)
    where stage = 'idle'
),

final as (
    select
        coalesce(c.team, u.team) as team,
        coalesce(c.requests, 0) as requests,
        coalesce(c.cost, 0) as cost,
        coalesce(c.idle_cost, 0) as idle_cost,
        coalesce(u.usage_idle, 0) as usage_idle,
        coalesce(u.usage_idle, 0) / nullif(a.idle, 0) as usage_idle_share
    from chosen as c
    full outer join by_usage as u on c.team = u.team
    cross join all_idle as a
    where coalesce(c.cost, 0) <> 0 or coalesce(c.requests, 0) <> 0 or coalesce(u.usage_idle, 0) <> 0
)

select * from final
order by cost desc, team
