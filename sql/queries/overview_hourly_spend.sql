-- one row per hour in [$start, $end) with spend: spend under idle policy $policy matching the
-- filters, for the month-end forecast (models/overview.py forecast_month_end)
select hour, sum(cost) as cost
from spend_hourly
where
    idle_policy = $policy and hour >= $start and hour < $end
    and ($environment is null or environment = $environment)
    and ($team is null or team = $team)
    and ($app is null or app = $app)
    and ($route is null or route = $route)
    and ($model is null or model = $model)
group by hour
order by hour
