-- one row per sampled request: (input_tokens, output_tokens) of at most $max_samples requests
-- per app in [$start, $end) and the scope (empty $apps / $routes lists and a NULL
-- $environment mean all), those with both counts >= 1. The sample is deterministic: the
-- requests first by a hash of their ids, so the same ledger gives the same sample.
with requests as (
    select app, trace_id, span_id, input_tokens, output_tokens
    from capacity_requests(
        $start::timestamptz, $end::timestamptz, $apps::varchar[], $routes::varchar[],
        $environment::varchar
    )
    where input_tokens >= 1 and output_tokens >= 1
),

ranked as (
    select
        *,
        row_number() over (
            partition by app order by hash(trace_id, span_id), trace_id, span_id
        ) as n
    from requests
),

final as (
    select app, input_tokens, output_tokens, trace_id, span_id
    from ranked
    where n <= $max_samples
)

select * from final order by app, trace_id, span_id
