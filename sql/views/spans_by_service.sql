-- one row per service.name: spans and traces received, newest span end
with final as (
    select
        coalesce(service_name, '(no service.name)') as service_name,
        count(*) as spans,
        count(distinct trace_id) as traces,
        make_timestamp(max(end_ns) // 1000) as last_span_at
    from spans
    group by 1
)

select * from final order by spans desc
