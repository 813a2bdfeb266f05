-- one row: where trace $trace_id sits in time, from the ledger's marts (mart_requests, then
-- mart_service_calls): a start_ns window for the span lookup, so DuckDB prunes the spans table
-- by its start_ns zone maps instead of scanning it, and the trace's task. `calls` = 0 when the
-- ledger does not know the trace (the page then falls back to a trace_id-only lookup).
-- The window is widened by 15 minutes on each side: the app's root span starts before its
-- first LLM or service call and ends after its last one.
with calls as (
    select start_ns, end_ns, task_key, 0 as rank
    from mart_requests
    where trace_id = $trace_id
    union all
    select start_ns, start_ns + cast(duration_s * 1e9 as bigint), task_key, 1 as rank
    from mart_service_calls
    where trace_id = $trace_id
),

final as (
    select
        count(*) as calls,
        min(start_ns) - 900000000000 as from_ns,
        max(end_ns) + 900000000000 as to_ns,
        arg_min(task_key, rank) as task_key
    from calls
)

select * from final
