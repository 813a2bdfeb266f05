-- explorer_requests(start, end, policy, environment, team, app, route, model, hosting,
-- failed_only, model_like, min_cost): the LLM requests in [start, end) matching the global and
-- the request explorer's filters (NULL / false: no restriction), with cost and idle share under
-- the idle policy. The explorer's page, newest-first page and summary all read through it
-- (sql/queries/requests_explorer*.sql), so they filter alike.
CREATE OR REPLACE MACRO explorer_requests(
    p_start, p_end, p_policy, p_environment, p_team, p_app, p_route, p_model, p_hosting,
    p_failed_only, p_model_like, p_min_cost
) AS TABLE
with requests as (
    select
        *,
        by_idle_policy(p_policy, 0.0, idle_usage_cost, idle_even_cost, idle_configured_cost)
            as idle_cost
    from mart_requests
    where
        hour >= p_start and hour < p_end
        and global_filter(
            environment, team, app, route, model, p_environment, p_team, p_app, p_route, p_model
        )
        and (p_hosting is null or hosting = p_hosting)
        and (not p_failed_only or failed)
        and (p_model_like is null or contains(lower(model), lower(p_model_like)))
),

costed as (
    select
        *,
        prefill_cost + decode_cost + idle_cost as cost,
        coalesce(input_tokens, 0) + coalesce(output_tokens, 0) as tokens
    from requests
    where p_min_cost is null or prefill_cost + decode_cost + idle_cost >= p_min_cost
)

select
    trace_id,
    span_id,
    start_ns,
    strftime(start_time, '%Y-%m-%d %H:%M:%S') as start_time,
    environment, app, team, route, workflow, model, deployment, replica, hosting, failed,
    input_tokens, cached_input_tokens, output_tokens, tokens,
    queue_s, prefill_s, decode_s, ttft_s, e2e_s,
    prefill_cost, decode_cost, idle_cost, cost,
    idle_cost / nullif(cost, 0) as idle_share
from costed;
