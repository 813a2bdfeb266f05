-- one row: failures in [$start, $end) matching the filters, at the three levels users mean
-- (docs/unit-economics.md, "What failed"):
-- - calls: LLM requests that started in the range and had an error status (client or engine),
--   from the hourly spend rollup;
-- - attempts: traces with an LLM call that started in the range; an attempt failed when its
--   root span has an error status (a guardrail block, a schema failure: the LLM call itself
--   succeeded) or every LLM call in it failed -- the rule sql/marts/tasks.sql uses;
-- - tasks: tasks that started in the range and match the filters (the tasks Unit economics
--   counts) with no successful final attempt: their latest attempt failed (whatever outcome a
--   span or a reviewer then recorded), or their outcome is `failed`.
-- Error roots (a few) are read from `spans` from 6 h before the range to 6 h after it: a root
-- starts before its calls, and a task's last attempt may run past the range.
with calls as (
    select trace_id, failed
    from mart_requests
    where
        hour >= $start and hour < $end
        and global_filter(
            environment, team, app, route, model, $environment, $team, $app, $route, $model
        )
),

error_roots as (
    select distinct trace_id
    from spans
    where
        parent_span_id is null and status_code = 2
        and start_ns >= epoch_ns($start) - 21600000000000
        and start_ns < epoch_ns($end) + 21600000000000
),

attempts as (
    select
        c.trace_id,
        bool_and(c.failed) or bool_or(r.trace_id is not null) as failed
    from calls as c
    left join error_roots as r on r.trace_id = c.trace_id
    group by c.trace_id
),

started as (
    -- outcomes_filtered's selection, task by task
    select task_key, outcome
    from mart_tasks
    where
        first_start >= $start and first_start < $end
        and global_filter(
            environment, team, app, route, null, $environment, $team, $app, $route, null
        )
        and ($model is null or first_model = $model or final_model = $model)
),

task_traces as (
    select
        m.task_key, m.trace_id, min(m.start_ns) as start_ns,
        bool_and(m.failed) or bool_or(r.trace_id is not null) as failed
    from mart_requests as m
    left join error_roots as r on r.trace_id = m.trace_id
    where
        m.hour >= $start and m.hour < $end + interval 6 hour
        and m.task_key in (select task_key from started)
    group by m.task_key, m.trace_id
),

last_attempts as (
    select task_key, arg_max(failed, [start_ns]) as failed
    from task_traces
    group by task_key
),

tasks as (
    select
        count(*)::bigint as tasks,
        count(*) filter (where s.outcome = 'failed' or l.failed)::bigint as failed_tasks
    from started as s
    left join last_attempts as l on l.task_key = s.task_key
),

spend as (
    -- the calls from the hourly spend rollup (what the Requests tile counts)
    select
        coalesce(sum(requests), 0)::bigint as requests,
        coalesce(sum(failed_requests), 0)::bigint as failed
    from spend_filtered($start, $end, 'separate', $environment, $team, $app, $route, $model)
),

final as (
    select
        (select requests from spend) as requests,
        (select failed from spend) as failed,
        (select count(*) from attempts)::bigint as attempts,
        (select count(*) filter (where failed) from attempts)::bigint as failed_attempts,
        t.tasks,
        t.failed_tasks
    from tasks as t
)

select
    requests,
    failed,
    failed / nullif(requests, 0) as failure_rate,
    attempts,
    failed_attempts,
    failed_attempts / nullif(attempts, 0) as attempt_failure_rate,
    tasks,
    failed_tasks,
    failed_tasks / nullif(tasks, 0) as task_failure_rate
from final
