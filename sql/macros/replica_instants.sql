-- one row per vLLM replica x scrape instant in [start_ts, end_ts) of the deployments the
-- environment and model filters select, with the window of window_s seconds from start_ts it
-- falls in (deployments have no team, app or route: those
-- filters do not narrow them): the seconds the instant stands for and the replica's gauges
-- there. An instant stands for the time until its replica's next scrape attempt (failed ones
-- included), at most max_gap_s; the last one in range for its replica's median interval.
-- Engines (series of the engine, model_name labels) of a replica: KV usage averaged,
-- waiting and running requests summed. Only scraped time counts, as in
-- sql/marts/efficiency_cache.sql. Shared by sql/queries/replica_windows.sql (the GPU page's
-- per-replica table and series) and sql/queries/rightsizing_windows.sql (right-sizing).
CREATE OR REPLACE MACRO replica_instants(
    start_ts, end_ts, window_s, max_gap_s, environment_filter, model_filter
) AS TABLE
with selected as (
    select replica
    from deployment_replicas
    where
        global_filter(
            environment, null, null, null, model,
            environment_filter, null, null, null, model_filter
        )
),

attempts as (
    select target, ts,
        date_diff('microsecond', ts, lead(ts) over (partition by target order by ts)) / 1e6
            as gap_s
    from scrapes
    where
        kind = 'vllm'
        and ts >= start_ts - to_seconds(max_gap_s)
        and ts < end_ts + to_seconds(max_gap_s)
        and target in (select replica from selected)
),

medians as (
    select target, median(gap_s) as median_gap_s from attempts group by target
),

stands as (
    select a.target, a.ts, least(coalesce(a.gap_s, m.median_gap_s, 0), max_gap_s) as seconds
    from attempts as a
    left join medians as m on m.target = a.target
    where a.ts >= start_ts and a.ts < end_ts
),

gauges as (
    select target, ts, series_key, metric, value
    from canonical_metric_samples()
    where
        metric in (
            'vllm:kv_cache_usage_perc', 'vllm:num_requests_waiting', 'vllm:num_requests_running'
        )
        and ts >= start_ts and ts < end_ts
        and target in (select replica from selected)
),

engines as (
    select
        target, ts, series_key,
        max(value) filter (where metric = 'vllm:kv_cache_usage_perc') as kv,
        max(value) filter (where metric = 'vllm:num_requests_waiting') as waiting,
        max(value) filter (where metric = 'vllm:num_requests_running') as running
    from gauges
    group by target, ts, series_key
)

select
    e.target, e.ts,
    to_timestamp(
        epoch(start_ts)
        + (epoch_us(e.ts) - epoch_us(start_ts)) // (cast(window_s as bigint) * 1000000)
        * window_s
    ) as window_start,
    any_value(s.seconds) as seconds,
    avg(e.kv) as kv,
    sum(e.waiting) as waiting,
    sum(e.running) as running
from engines as e
inner join stands as s on s.target = e.target and s.ts = e.ts
group by e.target, e.ts
