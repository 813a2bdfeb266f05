-- one row: LLM requests that started in [$start, $end) matching the filters, and how many failed
-- (error status on the client or engine span), from the hourly spend rollup
select
    coalesce(sum(requests), 0)::bigint as requests,
    coalesce(sum(failed_requests), 0)::bigint as failed,
    sum(failed_requests) / nullif(sum(requests), 0) as failure_rate
from spend_filtered($start, $end, 'separate', $environment, $team, $app, $route, $model)
