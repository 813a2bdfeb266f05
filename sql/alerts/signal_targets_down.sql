-- one row per scrape target scraped in [$start, $end): its deployment, its last $down_scrapes
-- scrapes before $end and how many of them failed, and its last scrape's error, for the
-- coverage_gap alert kind (a target whose last $down_scrapes scrapes all failed is down).
with recent as (
    select
        target, deployment, ts, up, error,
        row_number() over (partition by target order by ts desc) as back
    from scrapes
    where ts >= $start::timestamptz and ts < $end::timestamptz
),

final as (
    select
        target,
        coalesce(any_value(deployment), target) as deployment,
        count(*) as scrapes,
        count(*) filter (where not up) as failed,
        max(ts) as last_ts,
        any_value(error) filter (where back = 1) as last_error
    from recent
    where back <= $down_scrapes::integer
    group by target
)

select * from final
