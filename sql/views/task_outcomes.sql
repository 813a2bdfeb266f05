-- one row per task (task_key): mart_tasks with its week, idle-policy totals, waste and shares
-- Definitions: docs/cost-model.md ("Tasks and outcomes"), docs/unit-economics.md. Costs are
-- under the `separate` idle policy unless the column names another one.
with tasks as (
    select * from mart_tasks
),

final as (
    select
        task_key,
        environment,
        app,
        team,
        route,
        workflow,
        first_model,
        final_model,
        day,
        cast(date_trunc('week', day) as date) as week,    -- Monday of the task's ISO week
        first_start,
        last_end,
        decided_at,
        traces,
        attempts,
        retried,
        llm_calls,
        failed_calls,
        fallback_calls,
        unpriced_calls,
        service_calls,
        outcome,
        outcome_source,
        outcome in ('accepted', 'corrected') as is_accepted,  -- corrected = accepted with edits
        outcome <> 'pending' as decided,
        review_s,
        llm_cost,
        retrieval_cost,
        tools_cost,
        review_cost,
        total_cost,
        total_cost + idle_usage as total_cost_usage,
        total_cost + idle_even as total_cost_even,
        total_cost + idle_configured as total_cost_configured,
        idle_usage,
        idle_even,
        idle_configured,
        retry_cost,
        fallback_cost,
        failed_cost,
        -- a rejected or failed task is waste whole; otherwise its failed calls and attempts
        case when outcome in ('rejected', 'failed') then total_cost else failed_cost end
            as waste_cost,
        retry_cost / nullif(total_cost, 0) as retry_share,
        fallback_cost / nullif(total_cost, 0) as fallback_share,
        review_cost / nullif(total_cost, 0) as review_share,
        input_tokens,
        cached_input_tokens,
        output_tokens,
        input_tokens + output_tokens as tokens
    from tasks
)

select * from final
