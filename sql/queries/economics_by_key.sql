-- one row per key of $dim (workflow, route, app, team, environment or model = the task's final
-- model): tasks that started in the hours [$start, $end) and match the filters
-- (outcomes_filtered), their outcomes, cost per accepted outcome under idle policy $policy
-- (cost_per_accepted), waste split into disjoint parts, and retry, fallback and review cost.
-- Definitions: docs/unit-economics.md. Waste, retry, fallback and review costs are under the
-- `separate` policy (no idle), as in outcome_economics.
with tasks as (
    select
        coalesce(
            case $dim
                when 'workflow' then workflow
                when 'route' then route
                when 'app' then app
                when 'team' then team
                when 'environment' then environment
                when 'model' then final_model
            end,
            '(none)'
        ) as key,
        *
    from outcomes_filtered($start, $end, $policy, $environment, $team, $app, $route, $model)
),

sums as (
    select
        key,
        cast(sum(tasks) as bigint) as tasks,
        cast(sum(accepted) as bigint) as accepted,
        cast(sum(corrected) as bigint) as corrected,
        cast(sum(rejected) as bigint) as rejected,
        cast(sum(failed) as bigint) as failed,
        cast(sum(pending) as bigint) as pending,
        sum(policy_cost) as total_cost,
        sum(total_cost) as direct_cost,
        sum(waste_cost) as waste_cost,
        -- the waste, in disjoint parts that add up to waste_cost
        sum(rejected_cost) as rejected_cost,
        sum(failed_task_cost) as failed_task_cost,
        sum(failed_call_cost) as failed_call_cost,
        -- overheads: they overlap (a retried fallback call counts in both)
        sum(retry_cost) as retry_cost,
        sum(fallback_cost) as fallback_cost,
        sum(review_cost) as review_cost,
        sum(review_s) as review_s
    from tasks
    group by key
),

final as (
    select
        key, tasks, accepted, corrected, rejected, failed, pending,
        accepted_outcomes(accepted, corrected) as accepted_outcomes,
        tasks - pending as decided,
        total_cost, direct_cost, waste_cost, rejected_cost, failed_task_cost, failed_call_cost,
        retry_cost, fallback_cost, review_cost, review_s,
        cost_per_accepted(total_cost, accepted, corrected) as cost_per_accepted,
        acceptance_rate(tasks, accepted, corrected, pending) as acceptance_rate,
        waste_cost / nullif(direct_cost, 0) as waste_share,
        retry_cost / nullif(direct_cost, 0) as retry_share,
        fallback_cost / nullif(direct_cost, 0) as fallback_share,
        review_cost / nullif(direct_cost, 0) as review_share
    from sums
)

select * from final
order by cost_per_accepted desc nulls last, key
