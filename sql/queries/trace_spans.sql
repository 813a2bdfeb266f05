-- one row per span of trace $trace_id that started in [$from_ns, $to_ns), in start order, at
-- most $limit: what the waterfall draws (mapping rules applied, as in stg_spans). The window comes
-- from trace_window.sql so the scan prunes by start_ns; the fallback passes the whole range.
select
    span_id,
    parent_span_id,
    name,
    kind,
    service_name,
    start_ns,
    end_ns,
    status_code,
    status_message,
    stage,
    gen_ai_operation,
    request_model,
    input_tokens,
    cached_input_tokens,
    output_tokens,
    latency_queue_s,
    latency_ttft_s,
    latency_e2e_s,
    app,
    route,
    task_id,
    attempt,
    fallback
from mapped_spans($trace_id, $from_ns, $to_ns)
order by start_ns, span_id
limit $limit
