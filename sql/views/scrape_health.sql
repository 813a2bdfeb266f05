-- one row per scrape target ever scraped: its latest scrape (up, error, samples), its latest
-- success and how many scrapes have failed since.
-- scrapes is named in each CTE: DuckDB would materialize an import CTE read three times.
with latest as (
    select target, max(ts) as ts
    from scrapes
    group by target
),

last_success as (
    select target, max(ts) as last_success_ts
    from scrapes
    where up
    group by target
),

failures_since_success as (
    select s.target, count(*) as consecutive_failures
    from scrapes as s
    left join last_success as ok on ok.target = s.target
    where not s.up and (ok.last_success_ts is null or s.ts > ok.last_success_ts)
    group by s.target
),

final as (
    select
        s.target, s.kind, s.deployment, s.url,
        s.ts as last_scrape_ts,
        s.up, s.error, s.http_status, s.samples, s.duration_s,
        ok.last_success_ts,
        coalesce(f.consecutive_failures, 0) as consecutive_failures
    from scrapes as s
    inner join latest as l on l.target = s.target and l.ts = s.ts
    left join last_success as ok on ok.target = s.target
    left join failures_since_success as f on f.target = s.target
)

select * from final
