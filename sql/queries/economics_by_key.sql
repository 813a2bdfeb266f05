-- one row per key of $dim (workflow, route, app, team, environment or model = the task's final
-- model): tasks that started in the hours [$start, $end) (mart_outcomes_hourly), their outcomes, cost per accepted outcome under
-- idle policy $policy, waste split into disjoint parts, and retry, fallback and review cost
-- Definitions: docs/unit-economics.md. A task is kept when it matches every filter; the model
-- filter matches a task whose first or final LLM call used the model. Waste, retry, fallback
-- and review costs are under the `separate` policy (no idle), as in outcome_economics.
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
        case $policy
            when 'usage' then total_cost_usage
            when 'even' then total_cost_even
            when 'configured' then total_cost_configured
            else total_cost
        end as policy_cost,
        *
    from mart_outcomes_hourly
    where
        hour >= $start and hour < $end
        and ($environment is null or environment = $environment)
        and ($team is null or team = $team)
        and ($app is null or app = $app)
        and ($route is null or route = $route)
        and ($model is null or first_model = $model or final_model = $model)
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
        cast(sum(accepted) + sum(corrected) as bigint) as accepted_outcomes,
        cast(sum(tasks) - sum(pending) as bigint) as decided,
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
        *,
        total_cost / nullif(accepted_outcomes, 0) as cost_per_accepted,
        accepted_outcomes / nullif(decided, 0) as acceptance_rate,
        waste_cost / nullif(direct_cost, 0) as waste_share,
        retry_cost / nullif(direct_cost, 0) as retry_share,
        fallback_cost / nullif(direct_cost, 0) as fallback_share,
        review_cost / nullif(direct_cost, 0) as review_share
    from sums
)

select * from final
order by cost_per_accepted desc nulls last, key
