-- one row: what has been ingested so far (spans, traces, services, time range of spans)
with span_stats as (
    select
        count(*) as spans,
        count(distinct trace_id) as traces,
        count(distinct service_name) as services,
        min(start_ns) as first_start_ns,
        max(end_ns) as last_end_ns,
        max(received_at) as last_received_at
    from spans
),

final as (
    select
        spans,
        traces,
        services,
        case when first_start_ns is not null then make_timestamp(first_start_ns // 1000) end
            as first_span_at,
        case when last_end_ns is not null then make_timestamp(last_end_ns // 1000) end
            as last_span_at,
        last_received_at
    from span_stats
)

select * from final
