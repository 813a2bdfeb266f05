-- one row: how many LLM requests in [$start, $end) match the global and explorer filters (the
-- explorer's total and page count, $page_size rows a page), their cost under idle policy
-- $policy, how many failed themselves, and the failed attempts among their traces (root span
-- error, or every listed call of the trace failed: the Overview's rule). Same filters as
-- requests_explorer.sql.
with rows as (
    select *
    from explorer_requests(
        $start, $end, $policy, $environment, $team, $app, $route, $model, $hosting,
        $failed_only, $model_like, $min_cost
    )
),

traces as (
    select bool_or(root_failed) or bool_and(failed) as failed
    from rows
    group by trace_id
)

select
    count(*) as requests,
    coalesce(sum(cost), 0) as cost,
    coalesce(sum(prefill_cost + decode_cost), 0) as llm_cost,
    coalesce(sum(idle_cost), 0) as idle_cost,
    count(*) filter (where failed) as failed,
    (select count(*) filter (where failed) from traces) as failed_attempts,
    cast(ceil(count(*) / $page_size) as bigint) as pages
from rows
