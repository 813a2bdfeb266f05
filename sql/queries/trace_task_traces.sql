-- one row per trace of task $task_key whose LLM calls started in [$from_ns, $to_ns] (the task's
-- span from trace_task.sql, so the scan prunes), at most $limit, in start order: calls, failed
-- calls, attempt, cost under idle policy $policy, and whether the attempt failed: its root span
-- has an error status (a guardrail block, a schema failure) or every LLM call in it failed --
-- the rule of sql/marts/tasks.sql, the Overview's failed attempts and the request explorer's
-- "Failed only" (sql/macros/explorer_requests.sql).
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

error_roots as (
    select distinct trace_id
    from spans
    where
        parent_span_id is null and status_code = 2
        and start_ns >= $from_ns - 21600000000000 and start_ns <= $to_ns
        and trace_id in (select trace_id from calls)
),

final as (
    select
        c.trace_id,
        strftime(min(c.start_time), '%Y-%m-%d %H:%M:%S') as start_time,
        max(c.attempt) as attempt,
        count(*) as llm_calls,
        count(*) filter (where c.failed) as failed_calls,
        bool_and(c.failed) or bool_or(r.trace_id is not null) as attempt_failed,
        sum(c.cost) as cost
    from calls as c
    left join error_roots as r on r.trace_id = c.trace_id
    group by c.trace_id
    order by min(c.start_ns), c.trace_id
    limit $limit
)

select * from final
