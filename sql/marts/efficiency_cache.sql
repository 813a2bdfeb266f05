-- The metric side of the efficiency marts for one window of whole hours [$h0, $h1): prefix
-- cache, preemptions, tokens and KV cache per vLLM replica (mart_cache_hourly) and GPU
-- utilization per dcgm-exporter target (mart_gpu_hourly). Run by models/efficiency.py statement
-- by statement (each `-- step:` is one statement) inside one write transaction.
-- Definitions: docs/efficiency.md. Parameters: $h0, $h1 (TIMESTAMPTZ on whole hours),
-- $max_gap_s (a sample stands for at most this long: 300), $counter_max_gap_s (a counter pair
-- further apart than this counts nothing: 3600), $kv_high (KV usage that makes a wait
-- KV-bound: 0.9).
--
-- Hours are cut on Unix epoch arithmetic, not date_trunc: date_trunc on a TIMESTAMPTZ cuts in
-- the session's time zone, and an hour must be a UTC hour whatever the session says.
-- Every read filters metric_samples by metric name and time so that DuckDB's zonemaps prune
-- row groups: a refresh costs what its window holds, not what the table holds.

-- step: e_attempts
-- one row per scrape attempt of a vllm or dcgm target near the window: when it was, what the
-- sample it took stands for (until the target's next attempt, failed ones included, at most
-- $max_gap_s; the last one known: the target's median interval), and its deployment
create or replace temp table e_attempts as
with attempts as (
    select target, kind, ts, up, deployment
    from scrapes
    where
        kind in ('vllm', 'dcgm')
        and ts >= $h0 - to_seconds($counter_max_gap_s)
        and ts < $h1 + to_seconds($max_gap_s)
),

later as (
    -- targets scraped after the window: their last attempt in it has a successor we did not
    -- read, more than $max_gap_s after it, so it stands for $max_gap_s
    select distinct target
    from scrapes
    where kind in ('vllm', 'dcgm') and ts >= $h1 + to_seconds($max_gap_s)
),

timed as (
    select
        *,
        date_diff('microsecond', ts, lead(ts) over (partition by target order by ts)) / 1e6
            as gap_s
    from attempts
),

medians as (
    select target, median(gap_s) as median_gap_s
    from timed
    where gap_s is not null
    group by target
),

final as (
    select
        t.target,
        t.kind,
        t.ts,
        t.up,
        t.deployment,
        least(
            case
                when t.gap_s is not null then t.gap_s
                when l.target is not null then $max_gap_s
                else coalesce(m.median_gap_s, 0)
            end,
            $max_gap_s
        ) as stands_for_s
    from timed as t
    left join medians as m on m.target = t.target
    left join later as l on l.target = t.target
)

select * from final;

-- step: e_target_hours
-- one row per hour of the window x target scraped in [hour - $max_gap_s, hour + 1 h]: the
-- deployment it belongs to (its latest scrape there that named one, else its own name)
create or replace temp table e_target_hours as
with hours as (
    select to_timestamp(h) as hour
    from range(epoch($h0)::bigint, epoch($h1)::bigint, 3600) as r(h)
),

final as (
    select
        h.hour,
        a.target,
        any_value(a.kind) as kind,
        coalesce(arg_max(a.deployment, a.ts) filter (where a.deployment is not null), a.target)
            as deployment
    from hours as h
    inner join e_attempts as a
        on a.ts >= h.hour - to_seconds($max_gap_s) and a.ts <= h.hour + interval 1 hour
    group by h.hour, a.target
)

select * from final;

-- step: e_counters
-- one row per hour x vLLM target: the increases of its counters over the scrape intervals that
-- end in (hour, hour + 1 h], by Prometheus's reset rule (a drop means the counter restarted
-- from zero: the increase is the new value), as in sql/macros/counter_increases.sql. That
-- macro pairs samples over all history (a time filter cannot pass its window function), so
-- the same rule is applied here to the window and the hour before it; a pair more than
-- $counter_max_gap_s apart counts nothing, so the result does not depend on the window.
create or replace temp table e_counters as
with samples as (
    select target, metric, series_key, ts, value
    from canonical_metric_samples()
    where
        metric in (
            'vllm:prefix_cache_queries_total', 'vllm:prefix_cache_hits_total',
            'vllm:num_preemptions_total', 'vllm:request_success_total',
            'vllm:prompt_tokens_total', 'vllm:generation_tokens_total'
        )
        and type = 'counter'
        and ts > $h0 - to_seconds($counter_max_gap_s)
        and ts <= $h1
),

pairs as (
    select
        target, metric, series_key,
        lag(ts) over series_in_time as start_ts,
        ts as end_ts,
        lag(value) over series_in_time as start_value,
        value as end_value
    from samples
    window series_in_time as (partition by target, metric, series_key order by ts)
),

increases as (
    select
        target, metric,
        to_timestamp((epoch_us(end_ts) - 1) // 3600000000 * 3600) as hour,
        case when end_value < start_value then end_value else end_value - start_value end
            as increase
    from pairs
    where
        start_ts is not null
        and end_ts > $h0
        and date_diff('microsecond', start_ts, end_ts) <= $counter_max_gap_s * 1e6
),

final as (
    select
        hour,
        target,
        sum(increase) filter (where metric = 'vllm:prefix_cache_queries_total') as prefix_queries,
        sum(increase) filter (where metric = 'vllm:prefix_cache_hits_total') as prefix_hits,
        sum(increase) filter (where metric = 'vllm:num_preemptions_total') as preemptions,
        sum(increase) filter (where metric = 'vllm:request_success_total') as requests_finished,
        sum(increase) filter (where metric = 'vllm:prompt_tokens_total') as prompt_tokens,
        sum(increase) filter (where metric = 'vllm:generation_tokens_total') as generation_tokens
    from increases
    group by hour, target
)

select * from final;

-- step: e_instants
-- one row per vLLM target x scrape instant x hour that the instant's sample stands for:
-- the target's KV usage (mean over its engines), waiting and running requests (sums), whether
-- a request waited on an engine whose KV usage was >= $kv_high (KV-bound) or only on engines
-- below it (compute-bound), and the seconds of the hour the instant stands for
create or replace temp table e_instants as
with gauges as (
    -- canonical names: vllm:gpu_cache_usage_perc (vLLM < 0.10) arrives as vllm:kv_cache_usage_perc
    select g.target, g.ts, g.series_key, g.metric, g.value, a.stands_for_s
    from canonical_metric_samples() as g
    inner join e_attempts as a on a.target = g.target and a.ts = g.ts
    where
        g.metric in (
            'vllm:kv_cache_usage_perc', 'vllm:num_requests_waiting',
            'vllm:num_requests_running'
        )
        and g.ts >= $h0 - to_seconds($max_gap_s)
        and g.ts < $h1
        and a.kind = 'vllm'
),

engines as (
    -- one engine = one series (engine, model_name labels) of the target
    select
        target, ts, series_key,
        any_value(stands_for_s) as stands_for_s,
        max(value) filter (where metric = 'vllm:kv_cache_usage_perc') as kv,
        max(value) filter (where metric = 'vllm:num_requests_waiting') as waiting,
        max(value) filter (where metric = 'vllm:num_requests_running') as running
    from gauges
    group by target, ts, series_key
),

instants as (
    select
        target, ts,
        any_value(stands_for_s) as stands_for_s,
        avg(kv) as kv,
        sum(waiting) as waiting,
        sum(running) as running,
        coalesce(bool_or(waiting > 0), false) as any_waiting,
        coalesce(bool_or(waiting > 0 and kv >= $kv_high), false) as kv_bound,
        coalesce(bool_or(waiting > 0 and kv < $kv_high), false) as waiting_below_high
    from engines
    group by target, ts
),

split as (
    -- an instant stands for [ts, ts + stands_for_s), which may cross one hour boundary
    select
        i.*,
        epoch(i.ts) as t0,
        epoch(i.ts) + i.stands_for_s as t1,
        -- the hour of its start and of its last microsecond (an end on the hour is not in it)
        unnest(list_distinct([
            epoch_us(i.ts) // 3600000000 * 3600,
            greatest(epoch_us(i.ts), epoch_us(i.ts) + cast(i.stands_for_s * 1e6 as bigint) - 1)
                // 3600000000 * 3600
        ])) as hour_s
    from instants as i
),

final as (
    select
        target, ts, kv, waiting, running, any_waiting, kv_bound,
        waiting_below_high and not kv_bound as compute_bound,
        to_timestamp(hour_s) as hour,
        epoch_us(ts) // 3600000000 * 3600 = hour_s as sampled_in_hour,
        greatest(least(t1, hour_s + 3600) - greatest(t0, hour_s), 0) as seconds
    from split
    where hour_s >= epoch($h0) and hour_s < epoch($h1)
)

select * from final;

-- step: e_kv_percentiles
-- one row per hour x vLLM target: time-weighted percentiles of KV usage, the smallest usage
-- whose cumulative seconds (in increasing usage) reach q x the seconds covered
create or replace temp table e_kv_percentiles as
with weighted as (
    select
        hour, target, kv,
        sum(seconds) over (
            partition by hour, target order by kv rows between unbounded preceding and current row
        ) as cumulative_s,
        sum(seconds) over (partition by hour, target) as total_s
    from e_instants
    where kv is not null and seconds > 0
),

final as (
    select
        hour, target,
        min(kv) filter (where cumulative_s >= 0.5 * total_s - 1e-9) as kv_usage_p50,
        min(kv) filter (where cumulative_s >= 0.9 * total_s - 1e-9) as kv_usage_p90
    from weighted
    group by hour, target
)

select * from final;

-- step: e_kv_hist
-- one row per hour x vLLM target: seconds with KV usage in each of 100 buckets of 1 %
create or replace temp table e_kv_hist as
with by_bucket as (
    select
        hour, target,
        cast(least(greatest(floor(kv * 100), 0), 99) as integer) as bucket,
        sum(seconds) as seconds
    from e_instants
    where kv is not null
    group by all
),

keys as (
    select distinct hour, target from e_instants
),

filled as (
    select k.hour, k.target, r.bucket, coalesce(b.seconds, 0) as seconds
    from keys as k
    cross join (select range::integer as bucket from range(100)) as r
    left join by_bucket as b on b.hour = k.hour and b.target = k.target and b.bucket = r.bucket
),

final as (
    select hour, target, list(seconds order by bucket) as kv_usage_hist_s
    from filled
    group by hour, target
)

select * from final;

-- step: e_delete_cache
delete from mart_cache_hourly where hour >= $h0 and hour < $h1;

-- step: e_insert_cache
insert into mart_cache_hourly
with gauges as (
    select
        hour, target,
        count(*) filter (where sampled_in_hour and kv is not null) as samples,
        coalesce(sum(seconds) filter (where kv is not null), 0) as covered_s,
        sum(kv * seconds) filter (where kv is not null)
            / nullif(sum(seconds) filter (where kv is not null), 0) as kv_usage_mean,
        max(kv) filter (where seconds > 0) as kv_usage_max,
        coalesce(sum(seconds) filter (where kv >= $kv_high), 0) as kv_high_s,
        coalesce(sum(seconds) filter (where any_waiting), 0) as waiting_s,
        coalesce(sum(seconds) filter (where kv_bound), 0) as kv_bound_s,
        coalesce(sum(seconds) filter (where compute_bound), 0) as compute_bound_s,
        sum(running * seconds) filter (where running is not null)
            / nullif(sum(seconds) filter (where running is not null), 0) as running_mean,
        sum(waiting * seconds) filter (where waiting is not null)
            / nullif(sum(seconds) filter (where waiting is not null), 0) as waiting_mean
    from e_instants
    group by hour, target
),

keys as (
    select hour, target from gauges
    union
    select hour, target from e_counters
),

final as (
    select
        k.hour,
        k.target as replica,
        coalesce(th.deployment, k.target) as deployment,
        coalesce(c.prefix_queries, 0) as prefix_queries,
        coalesce(c.prefix_hits, 0) as prefix_hits,
        coalesce(c.preemptions, 0) as preemptions,
        coalesce(c.requests_finished, 0) as requests_finished,
        coalesce(c.prompt_tokens, 0) as prompt_tokens,
        coalesce(c.generation_tokens, 0) as generation_tokens,
        coalesce(g.samples, 0) as samples,
        coalesce(g.covered_s, 0) as covered_s,
        g.kv_usage_mean,
        p.kv_usage_p50,
        p.kv_usage_p90,
        g.kv_usage_max,
        coalesce(h.kv_usage_hist_s, list_transform(range(100), lambda i: 0.0))
            as kv_usage_hist_s,
        coalesce(g.kv_high_s, 0) as kv_high_s,
        coalesce(g.waiting_s, 0) as waiting_s,
        coalesce(g.kv_bound_s, 0) as kv_bound_s,
        coalesce(g.compute_bound_s, 0) as compute_bound_s,
        g.running_mean,
        g.waiting_mean
    from keys as k
    inner join e_target_hours as th
        on th.hour = k.hour and th.target = k.target and th.kind = 'vllm'
    left join gauges as g on g.hour = k.hour and g.target = k.target
    left join e_counters as c on c.hour = k.hour and c.target = k.target
    left join e_kv_percentiles as p on p.hour = k.hour and p.target = k.target
    left join e_kv_hist as h on h.hour = k.hour and h.target = k.target
)

select * from final;

-- step: e_delete_gpu
delete from mart_gpu_hourly where hour >= $h0 and hour < $h1;

-- step: e_insert_gpu
-- one row per hour x dcgm target: DCGM_FI_DEV_GPU_UTIL (percent) as a 0..1 share, each GPU's
-- sample weighted by the seconds of the hour it stands for
insert into mart_gpu_hourly
with samples as (
    select g.target, g.ts, g.series_key, g.value / 100.0 as util, a.stands_for_s
    from canonical_metric_samples() as g
    inner join e_attempts as a on a.target = g.target and a.ts = g.ts
    where
        g.metric = 'DCGM_FI_DEV_GPU_UTIL'
        and g.ts >= $h0 - to_seconds($max_gap_s)
        and g.ts < $h1
        and a.kind = 'dcgm'
),

split as (
    select
        *,
        epoch(ts) as t0,
        epoch(ts) + stands_for_s as t1,
        unnest(list_distinct([
            epoch_us(ts) // 3600000000 * 3600,
            greatest(epoch_us(ts), epoch_us(ts) + cast(stands_for_s * 1e6 as bigint) - 1)
                // 3600000000 * 3600
        ])) as hour_s
    from samples
),

pieces as (
    select
        target, series_key, util,
        to_timestamp(hour_s) as hour,
        greatest(least(t1, hour_s + 3600) - greatest(t0, hour_s), 0) as seconds
    from split
    where hour_s >= epoch($h0) and hour_s < epoch($h1)
),

final as (
    select
        p.hour,
        p.target,
        coalesce(any_value(th.deployment), p.target) as deployment,
        cast(count(distinct p.series_key) as integer) as gpus,
        sum(p.seconds) as gpu_covered_s,
        sum(p.util * p.seconds) / nullif(sum(p.seconds), 0) as gpu_util_mean,
        max(p.util) filter (where p.seconds > 0) as gpu_util_max
    from pieces as p
    left join e_target_hours as th on th.hour = p.hour and th.target = p.target
    group by p.hour, p.target
)

select * from final;

-- step: e_cleanup
drop table if exists e_attempts;
drop table if exists e_target_hours;
drop table if exists e_counters;
drop table if exists e_instants;
drop table if exists e_kv_percentiles;
drop table if exists e_kv_hist;
