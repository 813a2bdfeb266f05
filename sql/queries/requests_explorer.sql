-- one row per LLM request in [$start, $end) matching the global and explorer filters, one page
-- ($limit rows from $offset), ordered by $sort ($descending): an allowlisted key, never SQL
-- from input. Cost and idle share are under idle policy $policy.
select * exclude (start_ns)
from explorer_requests(
    $start, $end, $policy, $environment, $team, $app, $route, $model, $hosting, $failed_only,
    $model_like, $min_cost
)
order by
    case $sort
        when 'cost' then cost
        when 'tokens' then tokens
        when 'e2e' then e2e_s
        when 'ttft' then ttft_s
    end * case when $descending then -1 else 1 end nulls last,
    -- by start (exact nanoseconds): the 'start' sort itself, and newest first among ties
    case
        when $descending or $sort in ('cost', 'tokens', 'e2e', 'ttft') then -start_ns
        else start_ns
    end,
    span_id
limit $limit offset $offset
