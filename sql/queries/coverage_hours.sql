-- one row per deployment x hour in [$start, $end) from mart_coverage_hourly: replica-seconds
-- expected and scraped, requests that ran with no scrape behind them, estimated cost and
-- unpriced requests (ledger/coverage.py merges the incomplete hours into stretches). The
-- environment and model filters select deployments (deployment_replicas); deployments have no
-- team, app or route, so those filters do not narrow them.
with selected as (
    select distinct deployment
    from deployment_replicas
    where
        global_filter(environment, null, null, null, model, $environment, null, null, null, $model)
),

final as (
    select
        hour, deployment, replicas, expected_s, scraped_s, up_s, est_s, unpriced_s, requests,
        uncovered_requests, estimated_cost, unpriced_requests
    from mart_coverage_hourly
    where
        hour >= $start and hour < $end
        and (
            ($environment is null and $model is null)
            or deployment in (select deployment from selected)
        )
)

select * from final
order by deployment, hour
