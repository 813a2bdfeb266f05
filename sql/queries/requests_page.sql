-- one row per LLM request in [$start, $end) matching the filters, newest first, one page
select
    trace_id, span_id, start_time, environment, app, team, route, workflow, model, deployment,
    replica, hosting, failed, input_tokens, cached_input_tokens, output_tokens, queue_s,
    prefill_s, decode_s, ttft_s, e2e_s, prefill_cost, decode_cost,
    prefill_cost + decode_cost + idle_configured_cost as cost
from mart_requests
where
    hour >= $start and hour < $end
    and ($environment is null or environment = $environment)
    and ($team is null or team = $team)
    and ($app is null or app = $app)
    and ($route is null or route = $route)
    and ($model is null or model = $model)
order by start_ns desc
limit $limit offset $offset
