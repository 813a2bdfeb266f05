-- one row: the tasks that started in [$start, $end) and match the filters, in total: outcomes,
-- cost under idle policy $policy, cost per accepted outcome, waste and review cost (the
-- `separate` policy). Same task selection as economics_by_key.
with tasks as (
    select *
    from outcomes_filtered($start, $end, $policy, $environment, $team, $app, $route, $model)
),

sums as (
    select
        cast(coalesce(sum(tasks), 0) as bigint) as tasks,
        cast(coalesce(sum(accepted), 0) as bigint) as accepted,
        cast(coalesce(sum(corrected), 0) as bigint) as corrected,
        cast(coalesce(sum(pending), 0) as bigint) as pending,
        coalesce(sum(policy_cost), 0) as total_cost,
        coalesce(sum(total_cost), 0) as direct_cost,
        coalesce(sum(waste_cost), 0) as waste_cost,
        coalesce(sum(review_cost), 0) as review_cost
    from tasks
),

final as (
    select
        tasks,
        accepted_outcomes(accepted, corrected) as accepted_outcomes,
        tasks - pending as decided,
        total_cost, direct_cost, waste_cost, review_cost,
        cost_per_accepted(total_cost, accepted, corrected) as cost_per_accepted,
        acceptance_rate(tasks, accepted, corrected, pending) as acceptance_rate,
        waste_cost / nullif(direct_cost, 0) as waste_share,
        review_cost / nullif(direct_cost, 0) as review_share
    from sums
)

select * from final
