-- one row: whether any span has arrived, how many times the cost ledger has been refreshed and
-- the hours it holds; what a chart with nothing to show says about why (app/components.py)
with ingested as (
    -- existence, not a count: spans is the largest table
    select count(*) as spans from (select 1 from spans limit 1)
),

refreshed as (
    select count(*) as refreshes from mart_refresh_log
),

ledger as (
    select min(hour) as first_hour, max(hour) as last_hour from mart_spend_hourly
),

final as (
    select
        i.spans,
        r.refreshes,
        l.first_hour,
        l.last_hour
    from ingested as i
    cross join refreshed as r
    cross join ledger as l
)

select * from final
