-- Tasks and their outcomes, recomputed whole from the cost marts, run by models/unit_economics.py
-- statement by statement (each `-- step:` is one statement) inside the caller's write
-- transaction, after allocation.sql has filled the marts. Definitions: docs/cost-model.md
-- ("Tasks and outcomes") and docs/unit-economics.md. Times are integer Unix nanoseconds.
--
-- Order: one of the t_keys_* steps picks the tasks; t_reach / t_task_islands bound where their
-- rows can be; t_req_fill / t_svc_fill copy their rows, once per island ($a_ns, $b_ns); then
-- t_trace_reach / t_span_islands / t_spans_fill read the few spans the marts lack (root status,
-- attempt, outcome) with start_ns ranges, so DuckDB's zonemaps skip the rest of `spans`;
-- t_tasks computes, store_tasks / insert_tasks replace the tasks' rows of mart_tasks.

-- step: t_keys_window
-- one row per task with a request overlapping the window [$h0_ns, $h1_ns) (allocation.sql
-- rewrites those: a request that began up to $lookback_ns earlier included), a service call or
-- a review in the window, or a known range overlapping it (so a task whose rows are gone is
-- removed too)
create or replace temp table t_keys as
select task_key from mart_requests
where start_ns >= $h0_ns - $lookback_ns and start_ns < $h1_ns and end_ns >= $h0_ns
union
select task_key from mart_service_calls where start_ns >= $h0_ns and start_ns < $h1_ns
union
select task_key from mart_reviews
where hour >= to_timestamp($h0_ns // 1000000000) and hour < to_timestamp($h1_ns // 1000000000)
union
select task_key from mart_tasks
where first_start_ns < $h1_ns and last_end_ns >= $h0_ns;

-- step: t_keys_outcomes
-- one row per known task (a row in mart_tasks) named by an outcome received since $since (NULL:
-- every outcome). An outcome that names only a trace resolves to the task of that trace's calls,
-- as task_outcome_decisions does. A task not in mart_tasks yet is computed, with its posted
-- outcome, when its spans arrive and their window is refreshed.
create or replace temp table t_keys as
with changed as (
    select task_id, trace_id from outcomes
    where $since::timestamptz is null or received_at >= $since::timestamptz
),

trace_only as (
    select distinct trace_id from changed where task_id is null
),

keys as (
    select task_id as task_key from changed where task_id is not null
    union
    select 'trace:' || trace_id from trace_only
    union
    select r.task_key from mart_requests as r semi join trace_only as t on t.trace_id = r.trace_id
    union
    select s.task_key from mart_service_calls as s
    semi join trace_only as t on t.trace_id = s.trace_id
)

select task_key from keys semi join mart_tasks using (task_key);

-- step: t_reach
-- where the tasks' rows in the marts can start: each task's known range (mart_tasks, kept
-- current by refreshing every window after its allocation) and the window's requests
-- [$r0_ns, $r1_ns) (none outside a window refresh). Nothing of a task lies between the two.
create or replace temp table t_reach as
select t.first_start_ns as a, t.last_end_ns + 1 as b
from mart_tasks as t
semi join t_keys as k on k.task_key = t.task_key
union all
select $r0_ns::bigint as a, $r1_ns::bigint as b
where $r0_ns::bigint is not null;

-- step: t_task_islands
-- those ranges merged into disjoint islands (ranges closer than $gap_ns merge): one scan of the
-- marts per island
create or replace temp table t_islands as
with ordered as (
    select
        a, b,
        max(b) over (order by a, b rows between unbounded preceding and 1 preceding) as prev_b
    from t_reach
),

numbered as (
    select
        a, b,
        sum(case when prev_b is null or a > prev_b + $gap_ns then 1 else 0 end)
            over (order by a, b rows unbounded preceding) as island
    from ordered
)

select min(a) as a, max(b) as b from numbered group by island order by a;

-- step: t_req_init
create or replace temp table t_req as select * from mart_requests limit 0;

-- step: t_svc_init
create or replace temp table t_svc as select * from mart_service_calls limit 0;

-- step: t_req_fill
insert into t_req
select * from mart_requests
where start_ns >= $a_ns and start_ns < $b_ns and task_key in (select task_key from t_keys);

-- step: t_svc_fill
insert into t_svc
select * from mart_service_calls
where start_ns >= $a_ns and start_ns < $b_ns and task_key in (select task_key from t_keys);

-- step: t_trace_reach
-- one row per trace of the tasks: where its root span and outcome-carrying spans can start
-- (a root starts before its calls; $lookback_ns either side, as allocation.sql reaches back)
create or replace temp table t_trace_reach as
select
    trace_id,
    min(start_ns) - $lookback_ns as a,
    max(end_ns) + $lookback_ns as b
from (
    select trace_id, start_ns, end_ns from t_req
    union all
    select trace_id, start_ns, start_ns + cast(round(duration_s * 1e9) as bigint) from t_svc
)
group by trace_id;

-- step: t_span_islands
create or replace temp table t_islands as
with ordered as (
    select
        a, b,
        max(b) over (order by a, b rows between unbounded preceding and 1 preceding) as prev_b
    from t_trace_reach
),

numbered as (
    select
        a, b,
        sum(case when prev_b is null or a > prev_b + $gap_ns then 1 else 0 end)
            over (order by a, b rows unbounded preceding) as island
    from ordered
)

select min(a) as a, max(b) as b from numbered group by island order by a;

-- step: t_spans_init
-- the spans the marts lack: roots (status, attempt) and spans carrying an outcome. Read from
-- `spans`, not stg_spans: none of these columns is one that mapping rules set.
create or replace temp table t_spans as
select trace_id, span_id, parent_span_id, start_ns, end_ns, status_code, attempt, outcome
from spans limit 0;

-- step: t_spans_fill
insert into t_spans
select trace_id, span_id, parent_span_id, start_ns, end_ns, status_code, attempt, outcome
from spans
where
    start_ns >= $a_ns and start_ns < $b_ns
    and (parent_span_id is null or outcome is not null)
    and trace_id in (select trace_id from t_trace_reach);

-- step: t_tasks
-- one row per task of t_keys that still has a call: mart_tasks' columns
create or replace temp table t_tasks as
with calls as (
    select
        task_key, trace_id, 'llm' as kind, null as stage, start_ns, end_ns, attempt, fallback,
        failed, model, hosting, prefill_cost + decode_cost as cost, idle_usage_cost,
        idle_even_cost, idle_configured_cost, input_tokens, cached_input_tokens, output_tokens,
        environment, app, team, route, workflow
    from t_req
    union all
    select
        task_key, trace_id, 'service' as kind, stage, start_ns,
        start_ns + cast(round(duration_s * 1e9) as bigint) as end_ns, null as attempt,
        false as fallback, failed, null as model, null as hosting, cost, 0.0 as idle_usage_cost,
        0.0 as idle_even_cost, 0.0 as idle_configured_cost, null as input_tokens,
        null as cached_input_tokens, null as output_tokens, environment, app, team, route,
        workflow
    from t_svc
),

roots as (
    -- one root per trace (the earliest, if a trace has several)
    select trace_id, status_code, attempt
    from t_spans
    where parent_span_id is null
    qualify row_number() over (partition by trace_id order by start_ns, span_id) = 1
),

span_outcomes as (
    -- a trace's outcome: a root span's first, else the latest-ending span that carries one
    select trace_id, outcome, end_ns
    from t_spans
    where outcome in ('accepted', 'corrected', 'rejected', 'failed')
    qualify row_number() over (
        partition by trace_id order by (parent_span_id is null) desc, end_ns desc, span_id desc
    ) = 1
),

traces as (
    select
        task_key, trace_id,
        min(start_ns) as start_ns,
        min(attempt) as call_attempt,
        count(*) filter (where kind = 'llm') as llm_calls,
        count(*) filter (where kind = 'llm' and failed) as failed_llm_calls
    from calls
    group by task_key, trace_id
),

numbered as (
    -- a trace's attempt number: inferledger.attempt (root, else its calls), else its rank
    -- among the task's traces by start; a trace failed when its root span has an error
    -- status or every LLM call in it failed
    select
        t.task_key, t.trace_id,
        coalesce(
            r.attempt, t.call_attempt,
            row_number() over (partition by t.task_key order by t.start_ns, t.trace_id)
        ) as attempt_no,
        coalesce(r.status_code, 0) = 2
        or (t.llm_calls > 0 and t.failed_llm_calls = t.llm_calls) as trace_failed
    from traces as t
    left join roots as r on r.trace_id = t.trace_id
),

attempts as (
    select
        task_key,
        count(*) as traces,
        count(distinct attempt_no) as attempts,
        max(attempt_no) as last_attempt
    from numbered
    group by task_key
),

last_attempt as (
    select
        n.task_key,
        bool_and(n.trace_failed) as failed,
        arg_max(o.outcome, o.end_ns) filter (where o.outcome is not null) as span_outcome,
        max(o.end_ns) as span_outcome_ns
    from numbered as n
    inner join attempts as a on a.task_key = n.task_key and n.attempt_no = a.last_attempt
    left join span_outcomes as o on o.trace_id = n.trace_id
    group by n.task_key
),

costed as (
    select
        c.*,
        coalesce(c.attempt, n.attempt_no) as attempt_no,
        n.trace_failed
    from calls as c
    inner join numbered as n on n.task_key = c.task_key and n.trace_id = c.trace_id
),

per_task as (
    select
        task_key,
        arg_min(environment, start_ns) filter (where environment is not null) as environment,
        arg_min(app, start_ns) filter (where app is not null) as app,
        arg_min(team, start_ns) filter (where team is not null) as team,
        arg_min(route, start_ns) filter (where route is not null) as route,
        arg_min(workflow, start_ns) filter (where workflow is not null) as workflow,
        arg_min(model, [attempt_no, start_ns]) filter (where kind = 'llm' and model is not null)
            as first_model,
        arg_max(model, [start_ns, end_ns]) filter (where kind = 'llm' and model is not null)
            as final_model,
        min(start_ns) as first_start_ns,
        max(end_ns) as last_end_ns,
        count(*) filter (where kind = 'llm') as llm_calls,
        count(*) filter (where kind = 'llm' and failed) as failed_calls,
        count(*) filter (where kind = 'llm' and fallback) as fallback_calls,
        count(*) filter (where kind = 'llm' and hosting = 'unpriced') as unpriced_calls,
        count(*) filter (where kind = 'service') as service_calls,
        coalesce(sum(cost) filter (where kind = 'llm'), 0) as llm_cost,
        coalesce(sum(cost) filter (where stage = 'retrieval'), 0) as retrieval_cost,
        coalesce(sum(cost) filter (where stage = 'tools'), 0) as tools_cost,
        sum(idle_usage_cost) as idle_usage,
        sum(idle_even_cost) as idle_even,
        sum(idle_configured_cost) as idle_configured,
        coalesce(sum(cost) filter (where attempt_no > 1), 0) as retry_cost,
        coalesce(sum(cost) filter (where kind = 'llm' and fallback), 0) as fallback_cost,
        coalesce(sum(cost) filter (where failed or trace_failed), 0) as failed_cost,
        coalesce(sum(input_tokens), 0) as input_tokens,
        coalesce(sum(cached_input_tokens), 0) as cached_input_tokens,
        coalesce(sum(output_tokens), 0) as output_tokens
    from costed
    group by task_key
),

trace_tasks as (
    select trace_id, min(task_key) as task_key from calls group by trace_id
),

posted as (
    -- the latest posted decision per task, in task_outcome_decisions' order; an outcome that
    -- names only a trace resolves through the marts' calls instead of a scan of spans
    select
        coalesce(o.task_id, tt.task_key, 'trace:' || o.trace_id) as task_key,
        o.outcome,
        o.decided_at,
        o.received_at,
        o.outcome_id
    from outcomes as o
    left join trace_tasks as tt on o.task_id is null and tt.trace_id = o.trace_id
),

decisions as (
    select task_key, outcome, decided_at
    from posted
    semi join t_keys using (task_key)
    qualify row_number() over (
        partition by task_key order by decided_at desc, received_at desc, outcome_id desc
    ) = 1
),

final as (
    select
        p.task_key, p.environment, p.app, p.team, p.route, p.workflow, p.first_model,
        p.final_model,
        cast('1970-01-01' as date) + cast(p.first_start_ns // 86400000000000 as integer) as day,
        p.first_start_ns, p.last_end_ns,
        to_timestamp(p.first_start_ns // 1000 / 1e6) as first_start,
        to_timestamp(p.last_end_ns // 1000 / 1e6) as last_end,
        a.traces, a.attempts, a.attempts > 1 as retried,
        p.llm_calls, p.failed_calls, p.fallback_calls, p.unpriced_calls, p.service_calls,
        case
            when d.outcome is not null then d.outcome
            when l.span_outcome is not null then l.span_outcome
            when l.failed then 'failed'
            else 'pending'
        end as outcome,
        case
            when d.outcome is not null then 'posted'
            when l.span_outcome is not null then 'span'
        end as outcome_source,
        case
            when d.outcome is not null then d.decided_at
            when l.span_outcome is not null then to_timestamp(l.span_outcome_ns // 1000 / 1e6)
        end as decided_at,
        coalesce(rv.review_s, 0) as review_s,
        p.llm_cost, p.retrieval_cost, p.tools_cost,
        coalesce(rv.cost, 0) as review_cost,
        p.llm_cost + p.retrieval_cost + p.tools_cost + coalesce(rv.cost, 0) as total_cost,
        p.idle_usage, p.idle_even, p.idle_configured,
        p.retry_cost, p.fallback_cost, p.failed_cost,
        p.input_tokens, p.cached_input_tokens, p.output_tokens
    from per_task as p
    inner join attempts as a on a.task_key = p.task_key
    inner join last_attempt as l on l.task_key = p.task_key
    left join decisions as d on d.task_key = p.task_key
    left join mart_reviews as rv on rv.task_key = p.task_key
)

select * from final;

-- step: t_hours_before
-- the hours the recomputed tasks counted in before (a task's first start can move when an
-- earlier attempt arrives late): their rollup rows are recomputed too
create or replace temp table t_hours as
select distinct date_trunc('hour', first_start) as hour
from mart_tasks semi join t_keys using (task_key);

-- step: store_tasks
delete from mart_tasks where task_key in (select task_key from t_keys);

-- step: insert_tasks
insert into mart_tasks by name
select *, current_timestamp as refreshed_at from t_tasks;

-- step: t_hours_after
insert into t_hours
select distinct date_trunc('hour', first_start) as hour from t_tasks
where date_trunc('hour', first_start) not in (select hour from t_hours);

-- step: store_outcomes_hourly
delete from mart_outcomes_hourly where hour in (select hour from t_hours);

-- step: insert_outcomes_hourly
-- the sums behind outcome_economics and the Unit economics page, for every hour a recomputed
-- task counts in, whole
insert into mart_outcomes_hourly by name
select
    date_trunc('hour', first_start) as hour,
    workflow, app, route, team, environment, first_model, final_model,
    count(*) as tasks,
    count(*) filter (where outcome = 'accepted') as accepted,
    count(*) filter (where outcome = 'corrected') as corrected,
    count(*) filter (where outcome = 'rejected') as rejected,
    count(*) filter (where outcome = 'failed') as failed,
    count(*) filter (where outcome = 'pending') as pending,
    count(*) filter (where retried) as retried_tasks,
    cast(sum(llm_calls) as bigint) as llm_calls,
    cast(sum(failed_calls) as bigint) as failed_calls,
    cast(sum(fallback_calls) as bigint) as fallback_calls,
    cast(sum(unpriced_calls) as bigint) as unpriced_calls,
    cast(sum(input_tokens) as bigint) as input_tokens,
    cast(sum(output_tokens) as bigint) as output_tokens,
    cast(sum(tokens) as bigint) as tokens,
    sum(review_s) as review_s,
    sum(llm_cost) as llm_cost,
    sum(retrieval_cost) as retrieval_cost,
    sum(tools_cost) as tools_cost,
    sum(review_cost) as review_cost,
    sum(total_cost) as total_cost,
    sum(total_cost_usage) as total_cost_usage,
    sum(total_cost_even) as total_cost_even,
    sum(total_cost_configured) as total_cost_configured,
    sum(retry_cost) as retry_cost,
    sum(fallback_cost) as fallback_cost,
    sum(failed_cost) as failed_cost,
    sum(waste_cost) as waste_cost,
    coalesce(sum(total_cost) filter (where outcome = 'rejected'), 0) as rejected_cost,
    coalesce(sum(total_cost) filter (where outcome = 'failed'), 0) as failed_task_cost,
    coalesce(sum(failed_cost) filter (where outcome not in ('rejected', 'failed')), 0)
        as failed_call_cost
from task_outcomes
where date_trunc('hour', first_start) in (select hour from t_hours)
group by all;
