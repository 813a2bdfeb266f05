-- one row per environment x team x app x route x workflow x model x deployment x side
-- (in_window: started in [$window_start, $end); else the baseline [$baseline_start, $window_start)):
-- requests, failed or retried attempts, prefix-cache tokens and unpriced requests, shared by the
-- failure_rate, prefix_cache_regression and unpriced_usage alert kinds (ledger/alert_signals.py,
-- docs/alert-kinds.md). The hour column prunes the scan as the dashboard's queries do.
with requests as (
    select *
    from mart_requests
    where hour >= date_trunc('hour', $baseline_start::timestamptz) and hour < $end::timestamptz
        and start_time >= $baseline_start::timestamptz and start_time < $end::timestamptz
),

final as (
    select
        environment, team, app, route, workflow, model, deployment,
        start_time >= $window_start::timestamptz as in_window,
        count(*) as requests,
        count(*) filter (where failed or coalesce(attempt, 1) > 1) as failed_or_retried,
        count(*) filter (where cached_input_tokens is not null) as cache_requests,
        coalesce(sum(input_tokens) filter (where cached_input_tokens is not null), 0)
            as cache_queried_tokens,
        coalesce(sum(cached_input_tokens), 0) as cache_hit_tokens,
        count(*) filter (where cost_basis = 'unpriced' or hosting = 'unpriced') as unpriced
    from requests
    group by all
)

select * from final
