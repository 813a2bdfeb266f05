-- one row per span (trace_id, span_id), with the attribute mapping rules applied
-- and the attribute lists turned into `attributes` / `resource_attributes` maps
-- (the logic is the macro mapped_spans, which a lookup by trace calls with its trace id)
with spans_mapped as (
    select * from mapped_spans(null, null, null)
),

final as (
    select * from spans_mapped
)

select * from final
