-- one row per LLM request in [$start, $end) matching the global and explorer filters, newest
-- first, one page ($limit rows from $offset); cost and idle share under idle policy $policy.
-- requests_explorer.sql with its default order written as a plain column: DuckDB's top-N then
-- skips row groups by start_ns, twice as fast as the CASE sort on 1M requests; a test checks
-- that the two agree.
select * exclude (start_ns)
from explorer_requests(
    $start, $end, $policy, $environment, $team, $app, $route, $model, $hosting, $failed_only,
    $model_like, $min_cost
)
order by start_ns desc, span_id
limit $limit offset $offset
