-- one row per workflow x route: tasks by outcome, cost per accepted outcome, waste, retry,
-- fallback and review shares for tasks that started in [$start, $end) (mart_outcomes_hourly)
select
    workflow, route,
    cast(sum(tasks) as bigint) as tasks,
    cast(sum(accepted) as bigint) as accepted,
    cast(sum(corrected) as bigint) as corrected,
    cast(sum(rejected) as bigint) as rejected,
    cast(sum(failed) as bigint) as failed,
    cast(sum(pending) as bigint) as pending,
    sum(total_cost) as total_cost,
    sum(total_cost) / nullif(sum(accepted) + sum(corrected), 0) as cost_per_accepted,
    sum(waste_cost) as waste_cost,
    sum(retry_cost) / nullif(sum(total_cost), 0) as retry_share,
    sum(fallback_cost) / nullif(sum(total_cost), 0) as fallback_share,
    sum(review_cost) / nullif(sum(total_cost), 0) as review_share
from mart_outcomes_hourly
where
    hour >= $start and hour < $end
    and ($app is null or app = $app)
    and ($route is null or route = $route)
group by all
order by total_cost desc
