-- one row per environment x team x app x route x workflow x model x deployment x side x prompt
-- size bucket: requests whose input_tokens fall in bucket b = floor(16 * log2(input_tokens)),
-- i.e. [2^(b/16), 2^((b+1)/16)), a 4.4 % wide bucket; percentiles of any grouping are read off
-- the summed buckets (long_context, ledger/alert_signals.py). in_window: started in
-- [$window_start, $end); else the baseline [$baseline_start, $window_start).
with requests as (
    select *
    from mart_requests
    where hour >= date_trunc('hour', $baseline_start::timestamptz) and hour < $end::timestamptz
        and start_time >= $baseline_start::timestamptz and start_time < $end::timestamptz
        and input_tokens >= 1
),

final as (
    select
        environment, team, app, route, workflow, model, deployment,
        start_time >= $window_start::timestamptz as in_window,
        cast(floor(16 * log2(input_tokens)) as integer) as bucket,
        count(*) as requests
    from requests
    group by all
)

select * from final
