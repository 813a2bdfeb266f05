-- one row per LLM request in [$start, $end) matching the global and explorer filters, newest
-- first, one page ($limit rows from $offset); cost and idle share under idle policy $policy.
-- requests_explorer.sql with its default order written as a plain column: DuckDB's top-N then
-- skips row groups by start_ns, twice as fast as the CASE sort on 1M requests; a test checks
-- that the two agree.
with requests as (
    select
        *,
        case $policy
            when 'separate' then 0.0
            when 'usage' then idle_usage_cost
            when 'even' then idle_even_cost
            else idle_configured_cost
        end as idle_cost
    from mart_requests
    where
        hour >= $start and hour < $end
        and ($environment is null or environment = $environment)
        and ($team is null or team = $team)
        and ($app is null or app = $app)
        and ($route is null or route = $route)
        and ($model is null or model = $model)
        and ($hosting is null or hosting = $hosting)
        and (not $failed_only or failed)
        and ($model_like is null or contains(lower(model), lower($model_like)))
),

costed as (
    select
        *,
        prefill_cost + decode_cost + idle_cost as cost,
        coalesce(input_tokens, 0) + coalesce(output_tokens, 0) as tokens
    from requests
    where $min_cost is null or prefill_cost + decode_cost + idle_cost >= $min_cost
),

final as (
    select
        trace_id,
        span_id,
        strftime(start_time, '%Y-%m-%d %H:%M:%S') as start_time,
        environment, app, team, route, workflow, model, deployment, replica, hosting, failed,
        input_tokens, cached_input_tokens, output_tokens, tokens,
        queue_s, prefill_s, decode_s, ttft_s, e2e_s,
        prefill_cost, decode_cost, idle_cost, cost,
        idle_cost / nullif(cost, 0) as idle_share
    from costed
    order by start_ns desc, span_id
    limit $limit offset $offset
)

select * from final
