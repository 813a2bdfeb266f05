-- one row per LLM request (trace_id, span_id), with its cost by stage and its share of idle
-- under each idle policy (docs/cost-model.md). Read from the refresher's mart, never raw spans.
with requests as (
    select * from mart_requests
),

final as (
    select
        *,
        prefill_cost + decode_cost as cost,
        prefill_gpu_s + decode_gpu_s as gpu_s,
        prefill_cost + decode_cost + idle_usage_cost as cost_with_idle_usage,
        prefill_cost + decode_cost + idle_even_cost as cost_with_idle_even,
        prefill_cost + decode_cost + idle_configured_cost as cost_with_idle_configured
    from requests
)

select * from final
