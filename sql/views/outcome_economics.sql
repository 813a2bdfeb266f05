-- one row per day x workflow x app x route (UTC day a task started; NULL keys are their own group)
-- Cost per accepted outcome and where the money of each accepted outcome went. Sum the count
-- and cost columns to roll up; recompute ratios from the sums with the measure macros
-- (sql/macros/cost_per_accepted.sql, acceptance_rate.sql), as the Unit economics page does.
-- Definitions: docs/unit-economics.md.
with sums as (
    select
        cast(timezone('UTC', hour) as date) as day, workflow, app, route,
        cast(sum(tasks) as bigint) as tasks,
        cast(sum(accepted) as bigint) as accepted,
        cast(sum(corrected) as bigint) as corrected,
        cast(sum(rejected) as bigint) as rejected,
        cast(sum(failed) as bigint) as failed,
        cast(sum(pending) as bigint) as pending,
        cast(sum(retried_tasks) as bigint) as retried_tasks,
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
        sum(waste_cost) as waste_cost
    from mart_outcomes_hourly
    group by all
),

final as (
    select
        *,
        accepted_outcomes(accepted, corrected) as accepted_outcomes,
        cost_per_accepted(total_cost, accepted, corrected) as cost_per_accepted,
        cost_per_accepted(total_cost, accepted, 0) as cost_per_accepted_strict,
        cost_per_accepted(total_cost_configured, accepted, corrected)
            as cost_per_accepted_configured,
        acceptance_rate(tasks, accepted, corrected, pending) as acceptance_rate,
        waste_cost / nullif(total_cost, 0) as waste_share,
        retry_cost / nullif(total_cost, 0) as retry_share,
        fallback_cost / nullif(total_cost, 0) as fallback_share,
        review_cost / nullif(total_cost, 0) as review_share,
        llm_cost / nullif(llm_calls, 0) as cost_per_request,
        llm_cost * 1e6 / nullif(tokens, 0) as cost_per_1m_tokens
    from sums
)

select * from final
