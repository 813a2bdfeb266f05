-- one row: what InferLedger holds: spans received and the newest one, the hours the cost ledger
-- covers, the ledger's last refresh and its last one that recomputed hours (mart_refresh_log)
with received as (
    select count(*) as spans, max(end_ns) as last_end_ns, max(received_at) as last_received_at
    from spans
),

ledger as (
    select min(hour) as first_hour, max(hour) as last_hour from mart_spend_hourly
),

refreshes as (
    select
        count(*) as refreshes,
        max(started_at) as last_refresh_at,
        max(started_at) filter (where hours > 0) as last_work_at,
        arg_max(seconds, started_at) filter (where hours > 0) as last_work_s,
        arg_max(hours, started_at) filter (where hours > 0) as last_work_hours
    from mart_refresh_log
),

final as (
    select
        r.spans,
        case when r.last_end_ns is not null then make_timestamp(r.last_end_ns // 1000) end
            as last_span_at,
        r.last_received_at,
        l.first_hour,
        l.last_hour,
        f.refreshes,
        f.last_refresh_at,
        f.last_work_at,
        f.last_work_s,
        f.last_work_hours
    from received as r
    cross join ledger as l
    cross join refreshes as f
)

select * from final
