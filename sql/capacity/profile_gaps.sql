-- one row per app: how bursty its arrivals are inside [$start, $end) and the scope (empty
-- $apps / $routes lists and a NULL $environment mean all). Gaps between consecutive arrivals
-- are taken within each hour and divided by that hour's mean gap (so a rate that changes from
-- hour to hour is not mistaken for burstiness); cv2 is the variance of those normalised gaps
-- (their mean is 1 in every hour), over hours with at least 2 gaps.
with requests as (
    select app, hour, start_ns
    from capacity_requests(
        $start::timestamptz, $end::timestamptz, $apps::varchar[], $routes::varchar[],
        $environment::varchar
    )
),

gaps as (
    select
        app, hour,
        (start_ns - lag(start_ns) over (partition by app, hour order by start_ns)) / 1e9 as gap_s
    from requests
),

hourly as (
    select app, hour, gap_s, avg(gap_s) over (partition by app, hour) as mean_gap_s,
        count(*) over (partition by app, hour) as hour_gaps
    from gaps
    where gap_s is not null
),

final as (
    select app, count(*) as gaps, cast(var_pop(gap_s / mean_gap_s) as double) as cv2
    from hourly
    where hour_gaps >= 2 and mean_gap_s > 0
    group by all
)

select * from final order by app
