-- one row: the tasks that started in [$start, $end) and match the filters, in total: outcomes,
-- cost under idle policy $policy, cost per accepted outcome, waste and review cost (the
-- `separate` policy). Same task selection as economics_by_key.
with tasks as (
    select
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
        cast(coalesce(sum(tasks), 0) as bigint) as tasks,
        cast(coalesce(sum(accepted) + sum(corrected), 0) as bigint) as accepted_outcomes,
        cast(coalesce(sum(tasks) - sum(pending), 0) as bigint) as decided,
        coalesce(sum(policy_cost), 0) as total_cost,
        coalesce(sum(total_cost), 0) as direct_cost,
        coalesce(sum(waste_cost), 0) as waste_cost,
        coalesce(sum(review_cost), 0) as review_cost
    from tasks
),

final as (
    select
        *,
        total_cost / nullif(accepted_outcomes, 0) as cost_per_accepted,
        accepted_outcomes / nullif(decided, 0) as acceptance_rate,
        waste_cost / nullif(direct_cost, 0) as waste_share,
        review_cost / nullif(direct_cost, 0) as review_share
    from sums
)

select * from final
