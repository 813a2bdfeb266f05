-- explorer_requests(start, end, policy, environment, team, app, route, model, hosting,
-- failed_only, model_like, min_cost): the LLM requests in [start, end) matching the global and
-- the request explorer's filters (NULL / false: no restriction), with cost and idle share under
-- the idle policy. The explorer's page, newest-first page and summary all read through it
-- (sql/queries/requests_explorer*.sql), so they filter alike.
-- `root_failed`: the call's trace (its attempt) has a root span with an error status (a
-- guardrail block, a schema failure after a good call). "Failed only" keeps the calls that
-- failed and the calls of failed attempts: an attempt failed when its root failed or all its
-- calls did, the rule of the Overview's failed attempts and the trace page's task card
-- (sql/queries/overview_failures.sql, trace_task_traces.sql). Error roots are few: read from
-- `spans` from 6 h before the range (a root starts before its calls).
CREATE OR REPLACE MACRO explorer_requests(
    p_start, p_end, p_policy, p_environment, p_team, p_app, p_route, p_model, p_hosting,
    p_failed_only, p_model_like, p_min_cost
) AS TABLE
with error_roots as (
    select distinct trace_id
    from spans
    where
        parent_span_id is null and status_code = 2
        and start_ns >= epoch_ns(p_start) - 21600000000000 and start_ns < epoch_ns(p_end)
),

in_range as (
    select
        m.*,
        m.trace_id in (select trace_id from error_roots) as root_failed,
        by_idle_policy(p_policy, 0.0, idle_usage_cost, idle_even_cost, idle_configured_cost)
            as idle_cost
    from mart_requests as m
    where
        hour >= p_start and hour < p_end
        and global_filter(
            environment, team, app, route, model, p_environment, p_team, p_app, p_route, p_model
        )
        and (p_hosting is null or hosting = p_hosting)
        and (p_model_like is null or contains(lower(model), lower(p_model_like)))
),

costed as (
    select
        *,
        prefill_cost + decode_cost + idle_cost as cost,
        coalesce(input_tokens, 0) + coalesce(output_tokens, 0) as tokens
    from in_range
    where
        (p_min_cost is null or prefill_cost + decode_cost + idle_cost >= p_min_cost)
        and (not p_failed_only or failed or root_failed)
)

select
    trace_id,
    span_id,
    start_ns,
    strftime(start_time, '%Y-%m-%d %H:%M:%S') as start_time,
    environment, app, team, route, workflow, model, deployment, replica, hosting, failed,
    root_failed,
    input_tokens, cached_input_tokens, output_tokens, tokens,
    queue_s, prefill_s, decode_s, ttft_s, e2e_s,
    prefill_cost, decode_cost, idle_cost, cost,
    idle_cost / nullif(cost, 0) as idle_share,
    -- how the cost was obtained (measured, estimated, unpriced: sql/migrations/0012)
    cost_basis, estimated_cost
from costed;
