-- one row per app x route x stage: p50/p95/p99 over [$start, $end), from the latency histograms
select app, route, stage, sum(count) as count, max(p50_s) as p50_s, max(p95_s) as p95_s,
    max(p99_s) as p99_s
from latency_percentiles_over($start, $end)
where
    ($environment is null or environment = $environment)
    and ($app is null or app = $app)
    and ($route is null or route = $route)
group by all
order by app, route, stage
