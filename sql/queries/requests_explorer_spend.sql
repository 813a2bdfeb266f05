-- one row per part of the spend in [$start, $end) under idle policy $policy for the global
-- filters: the Spend page's total (spend_kpis.sql reads the same rows of spend_filtered), split
-- the way the request explorer labels it. The explorer's rows are LLM calls with their idle
-- share; the rest (review, retrieval, tools, idle nobody shares, hourly services with no call
-- in the hour) is per task or per hour, so the explorer states it beside its rows.
select
    case
        when stage in ('prefill', 'decode') then 'llm'
        when stage = 'idle' and app is not null then 'idle_shared'
        when stage = 'idle' then 'idle_unshared'
        when stage = 'review' then 'review'
        when stage in ('retrieval', 'tools') and app is null then 'hourly_services'
        when stage in ('retrieval', 'tools') then stage
        else 'other'
    end as part,
    coalesce(sum(cost), 0) as cost
from spend_filtered($start, $end, $policy, $environment, $team, $app, $route, $model)
group by all
order by part
