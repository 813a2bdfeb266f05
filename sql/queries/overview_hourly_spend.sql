-- one row per hour in [$start, $end) with spend: spend under idle policy $policy matching the
-- filters, for the month-end forecast (models/overview.py forecast_month_end)
select hour, sum(cost) as cost
from spend_hourly
where
    idle_policy = $policy and hour >= $start and hour < $end
    and global_filter(
        environment, team, app, route, model, $environment, $team, $app, $route, $model
    )
group by hour
order by hour
