-- one row per app x hour with requests: requests started in the hour, inside [$start, $end)
-- and the scope ($apps, $routes: empty lists mean all; $environment: NULL means all), for the
-- capacity planner's arrivals by hour of week and its forecast history.
with requests as (
    select app, hour
    from capacity_requests(
        $start::timestamptz, $end::timestamptz, $apps::varchar[], $routes::varchar[],
        $environment::varchar
    )
),

final as (
    select app, epoch(hour)::bigint as hour_s, count(*) as requests
    from requests
    group by all
)

select * from final order by app, hour_s
