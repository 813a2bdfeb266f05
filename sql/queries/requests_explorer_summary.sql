-- one row: how many LLM requests in [$start, $end) match the global and explorer filters (the
-- explorer's total and page count, $page_size rows a page), their cost under idle policy
-- $policy and how many failed. Same filters as requests_explorer.sql.
select
    count(*) as requests,
    coalesce(sum(cost), 0) as cost,
    count(*) filter (where failed) as failed,
    cast(ceil(count(*) / $page_size) as bigint) as pages
from explorer_requests(
    $start, $end, $policy, $environment, $team, $app, $route, $model, $hosting, $failed_only,
    $model_like, $min_cost
)
