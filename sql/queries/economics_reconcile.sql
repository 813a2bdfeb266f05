-- one row: how the tasks Unit economics counts (those that started in [$start, $end), task
-- keys matching the filters: outcomes_filtered) reconcile with the Spend page's total for the
-- same range and filters (spend_filtered, as spend_kpis.sql), under idle policy $policy:
--   spend = tasks_cost + unattached + before - after + other
-- unattached: idle nobody shares and hourly services with no call in the hour (no task);
-- before: costs in the range of tasks that started before it (counted in an earlier range);
-- after: costs after the range's end of tasks that started in it (in the tasks' cost, not in
-- the range's spend); other: what is left (a call straddling an hour edge at the range's
-- ends, a task's later calls carrying other keys than its first).
with spend as (
    select
        coalesce(sum(cost), 0) as spend,
        coalesce(
            sum(cost) filter (
                where
                    stage in ('idle', 'retrieval', 'tools') and app is null and team is null
                    and route is null and environment is null and workflow is null
            ),
            0
        ) as unattached
    from spend_filtered($start, $end, $policy, $environment, $team, $app, $route, $model)
),

tasks as (
    select coalesce(sum(policy_cost), 0) as tasks_cost
    from outcomes_filtered($start, $end, $policy, $environment, $team, $app, $route, $model)
),

earlier as (
    -- tasks that started before the range and still ran (or were reviewed) in it
    select task_key
    from mart_tasks
    where first_start < $start and last_end >= $start - interval 6 hour
),

before_costs as (
    select prefill_cost + decode_cost
        + by_idle_policy($policy, 0.0, idle_usage_cost, idle_even_cost, idle_configured_cost)
            as cost
    from mart_requests
    where
        hour >= $start and hour < $end
        and global_filter(
            environment, team, app, route, model, $environment, $team, $app, $route, $model
        )
        and task_key in (select task_key from earlier)
    union all
    select cost
    from mart_service_calls
    where
        hour >= $start and hour < $end
        and global_filter(
            environment, team, app, route, null, $environment, $team, $app, $route, $model
        )
        and $model is null
        and task_key in (select task_key from earlier)
    union all
    select cost
    from mart_reviews
    where
        hour >= $start and hour < $end
        and global_filter(
            environment, team, app, route, null, $environment, $team, $app, $route, $model
        )
        and $model is null
        and task_key in (select task_key from earlier)
),

later as (
    -- tasks counted here (started in the range, keys matching) that ran past its end
    select task_key
    from mart_tasks
    where
        first_start >= $start and first_start < $end
        and last_end >= $end - interval 1 hour
        and global_filter(
            environment, team, app, route, null, $environment, $team, $app, $route, null
        )
        and ($model is null or first_model = $model or final_model = $model)
),

after_costs as (
    select prefill_cost + decode_cost
        + by_idle_policy($policy, 0.0, idle_usage_cost, idle_even_cost, idle_configured_cost)
            as cost
    from mart_requests
    where hour >= $end and task_key in (select task_key from later)
    union all
    select cost from mart_service_calls
    where hour >= $end and task_key in (select task_key from later)
    union all
    select cost from mart_reviews
    where hour >= $end and task_key in (select task_key from later)
),

final as (
    select
        s.spend,
        t.tasks_cost,
        s.unattached,
        (select coalesce(sum(cost), 0) from before_costs) as before,
        (select coalesce(sum(cost), 0) from after_costs) as after
    from spend as s, tasks as t
)

select
    spend, tasks_cost, unattached, before, after,
    spend - tasks_cost - unattached - before + after as other
from final
