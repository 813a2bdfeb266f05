-- one row per deployment x window of $window_s seconds from $start (the last one ends at $end at
-- most) with a scrape of one of its vLLM replicas in it: what models/rightsizing.py sizes the
-- deployment from (docs/efficiency.md, "Right-sizing"). Only scraped time counts: the gauges
-- come from sql/macros/replica_instants.sql, as in replica_windows.sql (a scrape instant stands
-- for the time until its replica's next scrape attempt, at most $max_gap_s). Summed over the replicas up in the window: covered and busy
-- replica-seconds, busy replicas (busy shares), KV replicas (mean KV usage), KV-cache tokens
-- in use and held (mean usage x the replica's KV-cache tokens; NULL unless every replica's
-- cache size is known),
-- mean running and waiting requests, and the part of the waiting mean from samples whose queue
-- was still there at the replica's next scrape or waited on a full KV cache (at least $kv_high)
-- -- a queue seen at one scrape only is a burst as far as the scrapes can tell. Counter
-- increases (preemptions, prompt, generation and prefix-cache-hit tokens, finished requests
-- and their seconds running, the sum of vLLM's request_inference_time_seconds histogram) belong
-- to the window their interval ends in (Prometheus's reset rule; pairs more than
-- $counter_max_gap_s apart count nothing), as in sql/marts/efficiency_cache.sql. The
-- environment and model filters select deployments.
with selected as (
    select replica, deployment, kv_cache_tokens
    from deployment_replicas
    where
        -- deployments have no team, app or route: those filters do not narrow them
        global_filter(environment, null, null, null, model, $environment, null, null, null, $model)
),

instants as (
    select * from replica_instants($start, $end, $window_s, $max_gap_s, $environment, $model)
),

held as (
    -- did the queue seen at this sample last until the replica's next sample?
    select
        *,
        waiting > 0 and (
            coalesce(lead(waiting) over (partition by target order by ts), 0) > 0
            or kv >= $kv_high
        ) as queue_held
    from instants
),

replica_gauges as (
    select
        target as replica, window_start,
        count(*) as samples,
        sum(seconds) as covered_s,
        coalesce(sum(seconds) filter (where running > 0), 0) as busy_s,
        sum(kv * seconds) filter (where kv is not null)
            / nullif(sum(seconds) filter (where kv is not null), 0) as kv_mean,
        sum(waiting * seconds) filter (where waiting is not null)
            / nullif(sum(seconds) filter (where waiting is not null), 0) as waiting_mean,
        coalesce(sum(waiting * seconds) filter (where queue_held), 0)
            / nullif(sum(seconds) filter (where waiting is not null), 0) as waiting_held_mean,
        sum(running * seconds) filter (where running is not null)
            / nullif(sum(seconds) filter (where running is not null), 0) as running_mean
    from held
    group by target, window_start
),

counter_samples as (
    select target, metric, series_key, ts, value
    from canonical_metric_samples()
    where
        metric in (
            'vllm:num_preemptions_total', 'vllm:prompt_tokens_total',
            'vllm:generation_tokens_total', 'vllm:prefix_cache_hits_total',
            'vllm:request_success_total', 'vllm:request_inference_time_seconds_sum'
        )
        and type in ('counter', 'histogram')
        and ts >= $start - to_seconds($counter_max_gap_s) and ts < $end
        and target in (select replica from selected)
),

counter_pairs as (
    select
        target, metric, ts,
        lag(ts) over series_in_time as prev_ts,
        value,
        lag(value) over series_in_time as prev_value
    from counter_samples
    window series_in_time as (partition by target, metric, series_key order by ts)
),

counters as (
    select
        target as replica,
        to_timestamp(
            epoch($start)
            + (epoch_us(ts) - epoch_us($start)) // (cast($window_s as bigint) * 1000000)
            * $window_s
        ) as window_start,
        sum(case when value < prev_value then value else value - prev_value end)
            filter (where metric = 'vllm:num_preemptions_total') as preemptions,
        sum(case when value < prev_value then value else value - prev_value end)
            filter (where metric = 'vllm:prompt_tokens_total') as prompt_tokens,
        sum(case when value < prev_value then value else value - prev_value end)
            filter (where metric = 'vllm:generation_tokens_total') as generation_tokens,
        sum(case when value < prev_value then value else value - prev_value end)
            filter (where metric = 'vllm:prefix_cache_hits_total') as prefix_hit_tokens,
        sum(case when value < prev_value then value else value - prev_value end)
            filter (where metric = 'vllm:request_success_total') as requests_finished,
        sum(case when value < prev_value then value else value - prev_value end)
            filter (where metric = 'vllm:request_inference_time_seconds_sum') as running_s
    from counter_pairs
    where
        prev_ts is not null and ts >= $start
        and date_diff('microsecond', prev_ts, ts) <= $counter_max_gap_s * 1e6
    group by all
),

replica_rows as (
    select
        s.deployment, g.*,
        g.busy_s / nullif(g.covered_s, 0) as busy_share,
        g.kv_mean * s.kv_cache_tokens as kv_tokens,
        s.kv_cache_tokens,
        coalesce(c.preemptions, 0) as preemptions,
        c.prompt_tokens,
        c.generation_tokens,
        c.prefix_hit_tokens,
        c.requests_finished,
        c.running_s
    from replica_gauges as g
    inner join selected as s on s.replica = g.replica
    left join counters as c on c.replica = g.replica and c.window_start = g.window_start
),

final as (
    select
        deployment,
        window_start,
        count(*) as replicas_up,
        cast(sum(samples) as bigint) as samples,
        sum(covered_s) as covered_s,
        sum(busy_s) as busy_s,
        sum(busy_share) as busy_replicas,
        sum(kv_mean) as kv_replicas,
        -- NULL unless every replica's KV-cache size is known
        case when count(kv_tokens) = count(*) then sum(kv_tokens) end as kv_tokens,
        case when count(kv_cache_tokens) = count(*) then cast(sum(kv_cache_tokens) as double) end
            as kv_capacity_tokens,
        sum(running_mean) as running_mean,
        sum(waiting_mean) as waiting_mean,
        sum(waiting_held_mean) as waiting_held_mean,
        sum(preemptions) as preemptions,
        sum(prompt_tokens) as prompt_tokens,
        sum(generation_tokens) as generation_tokens,
        sum(prefix_hit_tokens) as prefix_hit_tokens,
        sum(requests_finished) as requests_finished,
        sum(running_s) as running_s
    from replica_rows
    group by deployment, window_start
)

select * from final
order by deployment, window_start
