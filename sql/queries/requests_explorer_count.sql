-- one row: how many LLM requests in [$start, $end) match the global and explorer filters: the
-- grid's row count, asked with each block of rows (requests_explorer_summary.sql says more,
-- once per filter change). Same filters as requests_explorer.sql.
select count(*) as requests
from explorer_requests(
    $start, $end, $policy, $environment, $team, $app, $route, $model, $hosting, $failed_only,
    $model_like, $min_cost
)
