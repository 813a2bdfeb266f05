-- The request side of the efficiency marts for one window of whole hours [$h0, $h1): latency
-- by stage (mart_latency_hourly, exact percentiles; mart_latency_buckets, a mergeable
-- histogram) and tokens and costs by app and route (mart_cache_by_app). Reads mart_requests and
-- mart_service_calls, so it runs after the cost refresher has filled those hours. Run by
-- models/efficiency.py statement by statement (each `-- step:` is one statement) inside one
-- write transaction. Definitions: docs/efficiency.md. Parameters: $h0, $h1 (TIMESTAMPTZ).

-- step: e_latency_values
-- one row per latency observation of a successful request or service call that started in the
-- window: its stage, its value in seconds and its histogram bucket. Negative or non-finite
-- values (clock skew, bad attributes) are left out.
-- Buckets: 0 below 1 ms; b in 1..288 for [1 ms x 10^((b-1)/48), 1 ms x 10^(b/48));
-- 289 for 1000 s and more (sql/macros/latency_percentiles_over.sql reads them back).
create or replace temp table e_latency_values as
with requests as (
    select hour, environment, app, route, model, queue_s, prefill_s, ttft_s, decode_s, tpot_s,
        e2e_s
    from mart_requests
    where hour >= $h0 and hour < $h1 and not failed
),

calls as (
    select hour, environment, app, route, stage, duration_s
    from mart_service_calls
    where hour >= $h0 and hour < $h1 and not failed
),

observations as (
    select hour, environment, app, route, model, 'queue' as stage, queue_s as value_s
    from requests
    union all
    select hour, environment, app, route, model, 'prefill', prefill_s from requests
    union all
    select hour, environment, app, route, model, 'ttft', ttft_s from requests
    union all
    select hour, environment, app, route, model, 'decode', decode_s from requests
    union all
    select hour, environment, app, route, model, 'tpot', tpot_s from requests
    union all
    select hour, environment, app, route, model, 'e2e', e2e_s from requests
    union all
    select hour, environment, app, route, null, stage, duration_s from calls
),

final as (
    select
        *,
        cast(case
            when value_s < 0.001 then 0
            when value_s >= 1000 then 289
            else least(greatest(1 + floor(48 * (log10(value_s) + 3)), 1), 288)
        end as smallint) as bucket
    from observations
    where value_s >= 0 and isfinite(value_s)
)

select * from final;

-- step: e_delete_latency
delete from mart_latency_hourly where hour >= $h0 and hour < $h1;

-- step: e_insert_latency
-- percentiles by nearest rank (quantile_disc: the ceil(q x count)-th smallest value), the
-- definition the histogram's error bound is stated against
insert into mart_latency_hourly
with final as (
    select
        hour, environment, app, route, stage,
        count(*) as count,
        sum(value_s) as sum_s,
        min(value_s) as min_s,
        max(value_s) as max_s,
        quantile_disc(value_s, 0.5) as p50_s,
        quantile_disc(value_s, 0.95) as p95_s,
        quantile_disc(value_s, 0.99) as p99_s
    from e_latency_values
    group by hour, environment, app, route, stage
)

select * from final;

-- step: e_delete_buckets
delete from mart_latency_buckets where hour >= $h0 and hour < $h1;

-- step: e_insert_buckets
insert into mart_latency_buckets
with final as (
    select
        hour, environment, app, route, model, stage, bucket,
        count(*) as count,
        sum(value_s) as sum_s,
        min(value_s) as min_s,
        max(value_s) as max_s
    from e_latency_values
    group by hour, environment, app, route, model, stage, bucket
)

select * from final;

-- step: e_delete_cache_by_app
delete from mart_cache_by_app where hour >= $h0 and hour < $h1;

-- step: e_insert_cache_by_app
-- every request, failed ones included: a failed request's prompt was still prefilled (and
-- cached). A span reporting more cached than input tokens counts as fully cached.
insert into mart_cache_by_app
with requests as (
    select
        hour, app, route, model, deployment, hosting,
        coalesce(input_tokens, 0) as input_tokens,
        cached_input_tokens is not null as reports_cache,
        least(coalesce(cached_input_tokens, 0), coalesce(input_tokens, 0)) as cached_tokens,
        coalesce(output_tokens, 0) as output_tokens,
        prefill_cost, decode_cost, prefill_gpu_s, decode_gpu_s
    from mart_requests
    where hour >= $h0 and hour < $h1
),

final as (
    select
        hour, app, route, model, deployment, hosting,
        count(*) as requests,
        sum(input_tokens) as input_tokens,
        coalesce(sum(input_tokens) filter (where reports_cache), 0)
            as cache_reported_input_tokens,
        sum(cached_tokens) as cached_input_tokens,
        sum(input_tokens - cached_tokens) as uncached_input_tokens,
        sum(output_tokens) as output_tokens,
        sum(prefill_cost) as prefill_cost,
        sum(decode_cost) as decode_cost,
        sum(prefill_gpu_s) as prefill_gpu_s,
        sum(decode_gpu_s) as decode_gpu_s
    from requests
    group by hour, app, route, model, deployment, hosting
)

select * from final;

-- step: e_cleanup
drop table if exists e_latency_values;
