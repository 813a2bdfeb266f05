-- one row per model a task of workflow $workflow started on (its first LLM call's model), for
-- the tasks that started in [$start, $end) and match the filters (outcomes_filtered): tasks,
-- accepted outcomes, cost per accepted outcome under idle policy $policy, retried tasks and
-- the retry and review shares of the cost before idle. The product lead's side-by-side: a
-- cheaper model whose retries and review make each accepted outcome dearer shows here.
with tasks as (
    select coalesce(first_model, '(none)') as model, *
    from outcomes_filtered($start, $end, $policy, $environment, $team, $app, $route, $model)
    where workflow = $workflow
),

sums as (
    select
        model,
        cast(sum(tasks) as bigint) as tasks,
        cast(sum(accepted) as bigint) as accepted,
        cast(sum(corrected) as bigint) as corrected,
        cast(sum(pending) as bigint) as pending,
        cast(sum(retried_tasks) as bigint) as retried_tasks,
        sum(policy_cost) as total_cost,
        sum(total_cost) as direct_cost,
        sum(retry_cost) as retry_cost,
        sum(review_cost) as review_cost
    from tasks
    group by model
)

select
    model, tasks, accepted_outcomes(accepted, corrected) as accepted_outcomes, retried_tasks,
    total_cost,
    cost_per_accepted(total_cost, accepted, corrected) as cost_per_accepted,
    acceptance_rate(tasks, accepted, corrected, pending) as acceptance_rate,
    retry_cost / nullif(direct_cost, 0) as retry_share,
    review_cost / nullif(direct_cost, 0) as review_share
from sums
order by cost_per_accepted nulls last, model
