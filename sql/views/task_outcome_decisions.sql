-- one row per task key with a posted outcome: the latest decision and how many were posted
-- A task key is the task id (inferledger.task.id), or 'trace:' || trace_id for a trace that
-- carries no task id (a task of its own; docs/cost-model.md, "Tasks and outcomes"). An outcome
-- posted with only a trace id resolves to the task id that the trace's spans carry, here at read
-- time, so an outcome posted before its spans arrive joins its task once they do. The latest
-- decision wins: by decided_at, then received_at, then outcome_id (so ties are deterministic).
with trace_only as (
    select distinct trace_id
    from outcomes
    where task_id is null
),

trace_tasks as (
    -- A trace should carry one task id; if its spans disagree, the smallest wins, so the
    -- answer is stable.
    select
        s.trace_id,
        min(s.task_id) as task_id
    from spans as s
    semi join trace_only as t on s.trace_id = t.trace_id
    where s.task_id is not null
    group by s.trace_id
),

keyed as (
    select
        coalesce(o.task_id, t.task_id, 'trace:' || o.trace_id) as task_key,
        o.outcome,
        o.review_s,
        o.reviewer,
        o.score,
        o.decided_at,
        o.received_at,
        o.outcome_id
    from outcomes as o
    left join trace_tasks as t on o.task_id is null and o.trace_id = t.trace_id
),

ranked as (
    select
        *,
        row_number() over (
            partition by task_key order by decided_at desc, received_at desc, outcome_id desc
        ) as recency,
        count(*) over (partition by task_key) as decisions
    from keyed
),

final as (
    select
        task_key,
        outcome,
        review_s,
        reviewer,
        score,
        decided_at,
        outcome_id,
        decisions
    from ranked
    where recency = 1
)

select * from final
