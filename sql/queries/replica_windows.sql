-- one row per vLLM replica x window of $window_s seconds from $start (the last one ends at $end
-- at most) with a scrape in it,
-- plus one row per deployment x window (replica NULL): the time scrapes covered, the time a
-- request was running (busy), KV-cache usage (time-weighted mean, peak), waiting and running
-- requests (mean, peak), preemptions, and the requests that started in the window with their
-- queue time p95 (nearest rank, engine spans' time in queue). Only scraped time counts: the
-- gauges come from sql/macros/replica_instants.sql (a scrape instant stands for the time until
-- its replica's next scrape attempt, at most $max_gap_s); a window without a scrape has no row. Deployment rows: KV weighted by covered time; waiting, running,
-- busy_replicas and kv_replicas summed over the replicas (their peaks: the sum of the
-- replicas' peaks, an upper bound). The environment and model filters select deployments.
with selected as (
    select replica, deployment
    from deployment_replicas
    where
        -- deployments have no team, app or route: those filters do not narrow them
        global_filter(environment, null, null, null, model, $environment, null, null, null, $model)
),

instants as (
    select * from replica_instants($start, $end, $window_s, $max_gap_s, $environment, $model)
),

replica_gauges as (
    select
        target as replica, window_start,
        count(*) as samples,
        sum(seconds) as covered_s,
        coalesce(sum(seconds) filter (where running > 0), 0) as busy_s,
        sum(kv * seconds) filter (where kv is not null)
            / nullif(sum(seconds) filter (where kv is not null), 0) as kv_mean,
        max(kv) as kv_max,
        sum(waiting * seconds) filter (where waiting is not null)
            / nullif(sum(seconds) filter (where waiting is not null), 0) as waiting_mean,
        max(waiting) as waiting_max,
        sum(running * seconds) filter (where running is not null)
            / nullif(sum(seconds) filter (where running is not null), 0) as running_mean,
        max(running) as running_max
    from instants
    group by target, window_start
),

counter_samples as (
    select target, series_key, ts, value
    from canonical_metric_samples()
    where
        metric = 'vllm:num_preemptions_total'
        and type = 'counter'
        and ts >= $start - interval 1 hour and ts < $end
        and target in (select replica from selected)
),

preemption_pairs as (
    select
        target, ts,
        lag(ts) over series_in_time as prev_ts,
        value,
        lag(value) over series_in_time as prev_value
    from counter_samples
    window series_in_time as (partition by target, series_key order by ts)
),

preemptions as (
    -- Prometheus's reset rule (a drop means a restart from zero); an increase belongs to the
    -- window its interval ends in; pairs more than an hour apart count nothing
    select
        target as replica,
        to_timestamp(
            epoch($start)
            + (epoch_us(ts) - epoch_us($start)) // (cast($window_s as bigint) * 1000000)
            * $window_s
        ) as window_start,
        sum(case when value < prev_value then value else value - prev_value end) as preemptions
    from preemption_pairs
    where
        prev_ts is not null and ts >= $start
        and date_diff('microsecond', prev_ts, ts) <= 3600 * 1e6
    group by all
),

replica_rows as (
    select
        s.deployment, g.*,
        g.busy_s / nullif(g.covered_s, 0) as busy_share,
        coalesce(p.preemptions, 0) as preemptions
    from replica_gauges as g
    inner join selected as s on s.replica = g.replica
    left join preemptions as p on p.replica = g.replica and p.window_start = g.window_start
),

requests as (
    select
        deployment, replica,
        to_timestamp(
            epoch($start)
            + (epoch_us(start_time) - epoch_us($start)) // (cast($window_s as bigint) * 1000000)
            * $window_s
        ) as window_start,
        queue_s
    from mart_requests
    where
        hour >= $start - interval 1 hour and hour < $end
        and start_time >= $start and start_time < $end
        and hosting = 'self_hosted' and deployment is not null and replica is not null
        and replica in (select replica from selected)
),

request_stats as (
    select
        deployment, replica, window_start,
        count(*) as requests,
        quantile_disc(queue_s, 0.95) filter (where isfinite(queue_s) and queue_s >= 0)
            as queue_p95_s
    from requests
    group by grouping sets ((deployment, replica, window_start), (deployment, window_start))
),

deployment_rows as (
    select
        deployment, null::varchar as replica, window_start,
        sum(samples) as samples,
        sum(covered_s) as covered_s,
        sum(busy_s) as busy_s,
        sum(kv_mean * covered_s) / nullif(sum(covered_s), 0) as kv_mean,
        max(kv_max) as kv_max,
        sum(waiting_mean) as waiting_mean,
        sum(waiting_max) as waiting_max,
        sum(running_mean) as running_mean,
        sum(running_max) as running_max,
        sum(busy_s) / nullif(sum(covered_s), 0) as busy_share,
        sum(preemptions) as preemptions,
        count(*) as replicas_up,
        sum(busy_share) as busy_replicas,
        sum(kv_mean) as kv_replicas
    from replica_rows
    group by deployment, window_start
),

rows as (
    select
        deployment, replica, window_start, samples, covered_s, busy_s, kv_mean, kv_max,
        waiting_mean, waiting_max, running_mean, running_max, busy_share, preemptions,
        1 as replicas_up, busy_share as busy_replicas, kv_mean as kv_replicas
    from replica_rows
    union all
    select * from deployment_rows
),

final as (
    select
        r.deployment,
        r.replica,
        r.window_start,
        least(r.window_start + to_seconds($window_s), $end) as window_end,
        r.replicas_up,
        cast(r.samples as bigint) as samples,
        r.covered_s,
        r.busy_s,
        r.busy_share,
        r.busy_replicas,
        r.kv_mean,
        r.kv_max,
        r.kv_replicas,
        r.waiting_mean,
        r.waiting_max,
        r.running_mean,
        r.running_max,
        r.preemptions,
        coalesce(q.requests, 0) as requests,
        q.queue_p95_s
    from rows as r
    left join request_stats as q
        on q.deployment = r.deployment
        and q.replica is not distinct from r.replica
        and q.window_start = r.window_start
)

select * from final
order by deployment, replica nulls first, window_start
