-- the ledger's observed LLM requests started in [$start, $end), as a replay trace
-- (ledger/traces.py writes them as JSON lines for `inferledger simulate --trace`): one row per
-- request in start order, optionally only those of $environment / $app / $route / $model
-- (NULL: all); usable is false for a request the trace leaves out (failed, or without prompt or
-- output token counts). The hour column prunes the scan as the dashboard's queries do.
with requests as (
    select *
    from mart_requests
    where hour >= date_trunc('hour', $start::timestamptz) and hour < $end::timestamptz
        and start_time >= $start::timestamptz and start_time < $end::timestamptz
        and ($environment::varchar is null or environment = $environment::varchar)
        and ($app::varchar is null or app = $app::varchar)
        and ($route::varchar is null or route = $route::varchar)
        and ($model::varchar is null or model = $model::varchar)
),

final as (
    select
        span_id,
        start_ns,
        app,
        route,
        input_tokens,
        coalesce(cached_input_tokens, 0) as cached_input_tokens,
        output_tokens,
        not failed and coalesce(input_tokens, 0) >= 1 and coalesce(output_tokens, 0) >= 1
            as usable
    from requests
    order by start_ns, span_id
)

select * from final
