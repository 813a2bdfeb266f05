-- one row per hour x deployment in [$start, $end) with a replica expected, scraped or busy:
-- the replica-seconds expected and scraped and the requests that ran unscraped, for a budget's
-- coverage (ledger/budget_status.py keeps the deployments of the budget's scope). An hour is
-- incomplete when scraped_s < expected_s or uncovered_requests > 0 (docs/cost-model.md).
with coverage as (
    select *
    from mart_coverage_hourly
    where hour >= $start::timestamptz and hour < $end::timestamptz
),

final as (
    select
        hour,
        deployment,
        expected_s,
        scraped_s,
        uncovered_requests
    from coverage
)

select * from final
