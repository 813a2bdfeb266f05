-- one row: the first and last vLLM scrape of the selected deployments' replicas in
-- [$start, $end) and their median scrape interval (seconds); NULLs when there is none. The
-- over-time charts pick their resolution from it (ledger/efficiency.series_window_s).
with selected as (
    select replica
    from deployment_replicas
    where
        -- deployments have no team, app or route: those filters do not narrow them
        global_filter(environment, null, null, null, model, $environment, null, null, null, $model)
),

attempts as (
    select
        ts,
        date_diff('microsecond', ts, lead(ts) over (partition by target order by ts)) / 1e6
            as gap_s
    from scrapes
    where
        kind = 'vllm' and ts >= $start and ts < $end
        and target in (select replica from selected)
),

final as (
    select min(ts) as first_scrape, max(ts) as last_scrape, median(gap_s) as scrape_interval_s
    from attempts
)

select * from final
