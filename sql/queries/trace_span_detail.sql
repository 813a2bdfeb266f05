-- one row per field, attribute and resource attribute of span $span_id of trace $trace_id
-- (started in [$from_ns, $to_ns)): section, key, value (text). Typed columns are listed under
-- the OpenTelemetry key they were read from (the first of the key's fallback chain,
-- docs/attributes.md); every other key comes from the span's attribute maps as received.
with span as (
    select *
    from mapped_spans($trace_id, $from_ns, $to_ns)
    where span_id = $span_id
    limit 1
),

span_fields as (
    select unnest(fields) as f, unnest(range(len(fields))) as ord
    from (select [
        struct_pack(key := 'name', value := name),
        struct_pack(key := 'trace_id', value := trace_id),
        struct_pack(key := 'span_id', value := span_id),
        struct_pack(key := 'parent_span_id', value := parent_span_id),
        struct_pack(
            key := 'kind',
            value := ['unspecified', 'internal', 'server', 'client', 'producer', 'consumer'][
                kind + 1
            ]
        ),
        struct_pack(
            key := 'status',
            value := ['unset', 'ok', 'error'][status_code + 1]
                || coalesce(': ' || status_message, '')
        ),
        struct_pack(key := 'start (UTC)', value := strftime(start_time, '%Y-%m-%d %H:%M:%S.%f')),
        struct_pack(key := 'duration (ms)', value := cast(round(duration_ms, 3) as varchar)),
        struct_pack(key := 'trace_state', value := trace_state),
        struct_pack(key := 'scope', value := scope_name || coalesce(' ' || nullif(scope_version, ''), '')),
        struct_pack(key := 'events', value := events),
        struct_pack(key := 'links', value := links),
        struct_pack(
            key := 'dropped attributes / events / links',
            value := dropped_attributes_count || ' / ' || dropped_events_count || ' / '
                || dropped_links_count
        )
    ] as fields from span)
),

typed_attributes as (
    select unnest([
        struct_pack(key := 'gen_ai.operation.name', value := gen_ai_operation),
        struct_pack(key := 'gen_ai.provider.name', value := gen_ai_provider),
        struct_pack(key := 'gen_ai.request.model', value := request_model),
        struct_pack(key := 'gen_ai.response.model', value := response_model),
        struct_pack(key := 'gen_ai.request.id', value := gen_ai_request_id),
        struct_pack(key := 'gen_ai.usage.input_tokens', value := cast(input_tokens as varchar)),
        struct_pack(
            key := 'gen_ai.usage.output_tokens', value := cast(output_tokens as varchar)
        ),
        struct_pack(
            key := 'gen_ai.usage.cache_read.input_tokens',
            value := cast(cached_input_tokens as varchar)
        ),
        struct_pack(
            key := 'gen_ai.request.max_tokens', value := cast(request_max_tokens as varchar)
        ),
        struct_pack(key := 'gen_ai.response.finish_reasons', value := finish_reasons),
        struct_pack(
            key := 'gen_ai.latency.time_in_queue', value := cast(latency_queue_s as varchar)
        ),
        struct_pack(
            key := 'gen_ai.latency.time_to_first_token', value := cast(latency_ttft_s as varchar)
        ),
        struct_pack(
            key := 'gen_ai.latency.time_in_model_prefill',
            value := cast(latency_prefill_s as varchar)
        ),
        struct_pack(
            key := 'gen_ai.latency.time_in_model_decode',
            value := cast(latency_decode_s as varchar)
        ),
        struct_pack(
            key := 'gen_ai.latency.time_in_model_inference',
            value := cast(latency_inference_s as varchar)
        ),
        struct_pack(key := 'gen_ai.latency.e2e', value := cast(latency_e2e_s as varchar)),
        struct_pack(key := 'inferledger.app', value := app),
        struct_pack(key := 'inferledger.team', value := team),
        struct_pack(key := 'inferledger.route', value := route),
        struct_pack(key := 'inferledger.stage', value := stage),
        struct_pack(key := 'inferledger.task.id', value := task_id),
        struct_pack(key := 'inferledger.workflow', value := workflow),
        struct_pack(key := 'inferledger.attempt', value := cast(attempt as varchar)),
        struct_pack(key := 'inferledger.fallback', value := cast(fallback as varchar)),
        struct_pack(key := 'inferledger.outcome', value := outcome),
        struct_pack(key := 'inferledger.review.seconds', value := cast(review_s as varchar))
    ]) as f
    from span
),

typed_resource as (
    select unnest([
        struct_pack(key := 'service.name', value := service_name),
        struct_pack(key := 'service.namespace', value := service_namespace),
        struct_pack(key := 'service.instance.id', value := service_instance_id),
        struct_pack(key := 'deployment.environment.name', value := environment)
    ]) as f
    from span
),

fields as (
    select 1 as section_order, ord, 'span' as section, f.key, f.value from span_fields
    union all
    select 2, 0, 'attribute', f.key, f.value from typed_attributes
    union all
    select 2, 0, 'attribute', unnest(map_keys(attributes)), unnest(map_values(attributes))
    from span
    union all
    select 3, 0, 'resource', f.key, f.value from typed_resource
    union all
    select
        3, 0, 'resource', unnest(map_keys(resource_attributes)),
        unnest(map_values(resource_attributes))
    from span
),

final as (
    -- a typed column can repeat a key its map kept (docs/attributes.md): list it once
    select section, key, value
    from fields
    where value is not null
    group by section, key, value
    order by min(section_order), min(ord), key
)

select * from final
