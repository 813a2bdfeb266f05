-- one row per deployment with replicas expected in the hours overlapping [$start, $end):
-- expected and scraped replica-seconds (mart_coverage_hourly), for the coverage_gap alert kind.
with coverage as (
    select *
    from mart_coverage_hourly
    where hour >= date_trunc('hour', $start::timestamptz) and hour < $end::timestamptz
),

final as (
    select
        deployment,
        sum(expected_s) as expected_s,
        sum(scraped_s) as scraped_s,
        sum(uncovered_requests) as uncovered_requests
    from coverage
    group by deployment
)

select * from final
