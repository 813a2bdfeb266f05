-- one row per app: its tasks that started in [$start, $end) and the scope (empty $apps /
-- $routes lists and a NULL $environment mean all), and their acceptance rate (accepted or
-- corrected / decided: sql/macros/acceptance_rate.sql), NULL when no task is decided.
with tasks as (
    select coalesce(app, '(none)') as app, outcome
    from task_outcomes
    where first_start >= $start::timestamptz and first_start < $end::timestamptz
        and capacity_in_scope(
            app, route, environment, $apps::varchar[], $routes::varchar[], $environment::varchar
        )
),

sums as (
    select
        app,
        count(*) as tasks,
        count(*) filter (where outcome = 'accepted') as accepted,
        count(*) filter (where outcome = 'corrected') as corrected,
        count(*) filter (where outcome = 'pending') as pending
    from tasks
    group by all
),

final as (
    select
        *,
        cast(acceptance_rate(tasks, accepted, corrected, pending) as double) as acceptance_rate
    from sums
)

select * from final order by app
