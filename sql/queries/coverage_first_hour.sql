-- one row: the ledger's first and last hour with any data (spend or replica time), whatever the
-- filters; a comparison period that starts before the first is incomplete (ledger/coverage.py)
with hours as (
    select min(hour) as first_hour, max(hour) as last_hour from mart_spend_hourly
    union all
    select min(hour), max(hour) from mart_coverage_hourly
),

final as (
    select min(first_hour) as first_hour, max(last_hour) as last_hour from hours
)

select * from final
