-- one row per trace of task $task_key whose LLM calls started in [$from_ns, $to_ns] (the task's
-- span from trace_task.sql, so the scan prunes), at most $limit, in start order: calls, failed
-- calls, attempt and cost under idle policy $policy
with calls as (
    select
        trace_id,
        start_ns,
        start_time,
        failed,
        attempt,
        prefill_cost + decode_cost
        + by_idle_policy($policy, 0.0, idle_usage_cost, idle_even_cost, idle_configured_cost)
            as cost
    from mart_requests
    where task_key = $task_key and start_ns >= $from_ns and start_ns <= $to_ns
),

final as (
    select
        trace_id,
        strftime(min(start_time), '%Y-%m-%d %H:%M:%S') as start_time,
        max(attempt) as attempt,
        count(*) as llm_calls,
        count(*) filter (where failed) as failed_calls,
        sum(cost) as cost
    from calls
    group by trace_id
    order by min(start_ns), trace_id
    limit $limit
)

select * from final
