-- one row: spend, idle, requests and tokens in [$start, $end) under idle policy $policy
select
    coalesce(sum(cost), 0) as cost,
    coalesce(sum(cost) filter (where stage = 'idle'), 0) as idle_cost,
    coalesce(sum(cost) filter (where stage = 'idle' and app is null), 0) as unshared_idle_cost,
    coalesce(sum(requests), 0) as requests,
    coalesce(sum(input_tokens), 0) as input_tokens,
    coalesce(sum(output_tokens), 0) as output_tokens
from spend_filtered($start, $end, $policy, $environment, $team, $app, $route, $model)
