-- one row for task $task_key (task_outcomes) or none: its outcome, what it cost under idle
-- policy $policy and how (LLM, retrieval, tools, review, waste), its attempts and traces, and
-- its time span in ns (for trace_task_traces.sql)
with task as (
    select
        *,
        by_idle_policy(
            $policy, total_cost, total_cost_usage, total_cost_even, total_cost_configured
        ) as cost
    from task_outcomes
    where task_key = $task_key
),

final as (
    select
        task_key, environment, app, team, route, workflow, outcome, outcome_source,
        strftime(decided_at, '%Y-%m-%d %H:%M:%S') as decided_at,
        traces, attempts, llm_calls, failed_calls, fallback_calls, service_calls,
        cost, llm_cost, retrieval_cost, tools_cost, review_cost, waste_cost,
        epoch_ns(first_start) as first_start_ns,
        epoch_ns(last_end) as last_end_ns
    from task
)

select * from final
