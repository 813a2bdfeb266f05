-- one row per environment x team x app x route x workflow x side (in_window: the task's first
-- call started in [$window_start, $end); else the previous window [$baseline_start,
-- $window_start)): tasks, decided and accepted tasks, decided tasks' cost, LLM cost, calls and
-- tokens, for the false_economy alert kind. Decided and accepted as task_outcomes counts them
-- (pending tasks are left out of cost per accepted outcome on both sides).
with tasks as (
    select *
    from mart_tasks
    where first_start >= $baseline_start::timestamptz and first_start < $end::timestamptz
),

final as (
    select
        environment, team, app, route, workflow,
        first_start >= $window_start::timestamptz as in_window,
        count(*) as tasks,
        count(*) filter (where outcome <> 'pending') as decided,
        count(*) filter (where outcome in ('accepted', 'corrected')) as accepted,
        coalesce(sum(total_cost) filter (where outcome <> 'pending'), 0) as decided_cost,
        sum(llm_cost) as llm_cost,
        cast(sum(llm_calls) as bigint) as llm_calls,
        cast(sum(input_tokens + output_tokens) as bigint) as tokens
    from tasks
    group by all
)

select * from final
