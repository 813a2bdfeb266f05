-- one row per span of the decoded batch not already stored (trace_id, span_id); returns the count
-- Inputs registered by ingest/span_writer.py: batch_spans, batch_scopes, batch_resources (the
-- Arrow tables of ingest.otlp_decode.DecodedTraces) and $min_start / $max_start, the batch's
-- start_ns range, which lets the duplicate check prune storage blocks by their min/max.
-- Typed columns follow docs/attributes.md: the current semantic-convention key first, then the
-- older name vLLM still emits, then (for our convention keys) the resource attribute.
INSERT INTO spans BY NAME
WITH batch AS (
    SELECT s.*, r.resource_attributes, sc.scope_name, sc.scope_version
    FROM batch_spans AS s
    JOIN batch_resources AS r USING (resource_index)
    JOIN batch_scopes AS sc USING (scope_index)
),

unique_in_batch AS (
    SELECT * FROM batch
    QUALIFY row_number() OVER (PARTITION BY trace_id, span_id ORDER BY resource_index, scope_index) = 1
),

new_spans AS (
    SELECT b.* FROM unique_in_batch AS b
    WHERE NOT EXISTS (
        SELECT 1 FROM spans AS s
        WHERE s.start_ns BETWEEN $min_start AND $max_start
          AND s.trace_id = b.trace_id
          AND s.span_id = b.span_id
    )
),

final AS (
    SELECT
        trace_id, span_id, parent_span_id, trace_state, flags, name,
        kind::TINYINT AS kind, start_ns, end_ns,
        status_code::TINYINT AS status_code, status_message,
        resource_attributes['service.name'] AS service_name,
        resource_attributes['service.namespace'] AS service_namespace,
        resource_attributes['service.instance.id'] AS service_instance_id,
        coalesce(
            resource_attributes['deployment.environment.name'],
            resource_attributes['deployment.environment'],
            attributes['deployment.environment.name']
        ) AS environment,
        scope_name, scope_version,
        attributes['gen_ai.operation.name'] AS gen_ai_operation,
        coalesce(attributes['gen_ai.provider.name'], attributes['gen_ai.system']) AS gen_ai_provider,
        attributes['gen_ai.request.model'] AS request_model,
        attributes['gen_ai.response.model'] AS response_model,
        coalesce(attributes['gen_ai.request.id'], attributes['gen_ai.response.id']) AS gen_ai_request_id,
        TRY_CAST(TRY_CAST(coalesce(attributes['gen_ai.usage.input_tokens'],
                                   attributes['gen_ai.usage.prompt_tokens']) AS DOUBLE) AS BIGINT) AS input_tokens,
        TRY_CAST(TRY_CAST(coalesce(attributes['gen_ai.usage.output_tokens'],
                                   attributes['gen_ai.usage.completion_tokens']) AS DOUBLE) AS BIGINT) AS output_tokens,
        TRY_CAST(TRY_CAST(coalesce(attributes['gen_ai.usage.cache_read.input_tokens'],
                                   attributes['gen_ai.usage.cached_tokens']) AS DOUBLE) AS BIGINT) AS cached_input_tokens,
        TRY_CAST(TRY_CAST(attributes['gen_ai.request.max_tokens'] AS DOUBLE) AS BIGINT) AS request_max_tokens,
        attributes['gen_ai.response.finish_reasons'] AS finish_reasons,
        TRY_CAST(attributes['gen_ai.latency.time_in_queue'] AS DOUBLE) AS latency_queue_s,
        TRY_CAST(attributes['gen_ai.latency.time_to_first_token'] AS DOUBLE) AS latency_ttft_s,
        TRY_CAST(attributes['gen_ai.latency.time_in_model_prefill'] AS DOUBLE) AS latency_prefill_s,
        TRY_CAST(attributes['gen_ai.latency.time_in_model_decode'] AS DOUBLE) AS latency_decode_s,
        TRY_CAST(attributes['gen_ai.latency.time_in_model_inference'] AS DOUBLE) AS latency_inference_s,
        TRY_CAST(attributes['gen_ai.latency.e2e'] AS DOUBLE) AS latency_e2e_s,
        coalesce(attributes['inferledger.app'], resource_attributes['inferledger.app']) AS app,
        coalesce(attributes['inferledger.team'], resource_attributes['inferledger.team']) AS team,
        coalesce(attributes['inferledger.route'], attributes['http.route']) AS route,
        attributes['inferledger.stage'] AS stage,
        attributes['inferledger.task.id'] AS task_id,
        coalesce(attributes['inferledger.workflow'], resource_attributes['inferledger.workflow']) AS workflow,
        TRY_CAST(TRY_CAST(attributes['inferledger.attempt'] AS DOUBLE) AS INTEGER) AS attempt,
        TRY_CAST(attributes['inferledger.fallback'] AS BOOLEAN) AS fallback,
        lower(attributes['inferledger.outcome']) AS outcome,
        TRY_CAST(attributes['inferledger.review.seconds'] AS DOUBLE) AS review_s,
        attributes, resource_attributes, events, links,
        dropped_attributes_count, dropped_events_count, dropped_links_count
    FROM new_spans
)

SELECT * FROM final
