-- one row per LLM request of trace $trace_id (mart_requests, started in [$from_ns, $to_ns) so
-- the scan prunes), in start order: stages, tokens, GPU-seconds, prefill/decode cost, the idle
-- share under every policy and, under idle policy $policy, its idle share and total cost; the
-- trace's totals (trace_cost, trace_gpu_s) repeated on every row
with requests as (
    select
        *,
        by_idle_policy($policy, 0.0, idle_usage_cost, idle_even_cost, idle_configured_cost)
            as idle_cost
    from mart_requests
    where trace_id = $trace_id and start_ns >= $from_ns and start_ns < $to_ns
),

final as (
    select
        span_id,
        engine_span_id,
        strftime(start_time, '%Y-%m-%d %H:%M:%S') as start_time,
        operation, model, deployment, replica, hosting, failed, attempt, fallback,
        input_tokens, cached_input_tokens, output_tokens,
        queue_s, prefill_s, decode_s, ttft_s, e2e_s,
        prefill_gpu_s, decode_gpu_s, prefill_gpu_s + decode_gpu_s as gpu_s,
        prefill_cost, decode_cost,
        idle_usage_cost, idle_even_cost, idle_configured_cost,
        idle_cost,
        prefill_cost + decode_cost + idle_cost as cost,
        sum(prefill_cost + decode_cost + idle_cost) over () as trace_cost,
        sum(prefill_gpu_s + decode_gpu_s) over () as trace_gpu_s
    from requests
    order by start_ns, span_id
)

select * from final
