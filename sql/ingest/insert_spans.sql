-- one row per span of the decoded batch not already stored (trace_id, span_id); returns the count
-- Inputs registered by ingest/span_writer.py: batch_spans, batch_scopes, batch_resources (the
-- Arrow tables of ingest.otlp_decode.DecodedTraces, with each attribute map split into key and
-- value lists) and $min_start / $max_start, the batch's start_ns range, which lets the duplicate
-- check prune storage blocks by their min/max. kv(ak, av, k) is the span attribute k and
-- kv(rk, rv, k) the resource attribute k, NULL when absent (sql/macros/attribute_value.sql).
-- Typed columns follow docs/attributes.md: the current semantic-convention key first, then the
-- older name vLLM still emits, then (for our convention keys) the resource attribute.
INSERT INTO spans BY NAME
WITH batch AS (
    SELECT
        s.*, r.resource_keys, r.resource_values, sc.scope_name, sc.scope_version,
        s.attr_keys AS ak, s.attr_values AS av, r.resource_keys AS rk, r.resource_values AS rv
    FROM batch_spans AS s
    JOIN batch_resources AS r USING (resource_index)
    JOIN batch_scopes AS sc USING (scope_index)
),

-- A span repeated inside one request is stored once. The window is costly, so it only runs when
-- the writer saw repeated span ids ($has_repeats); the constant filters fold away at plan time.
unique_in_batch AS (
    SELECT * FROM batch WHERE NOT $has_repeats
    UNION ALL
    SELECT * FROM (
        SELECT * FROM batch WHERE $has_repeats
        QUALIFY row_number() OVER (
            PARTITION BY trace_id, span_id ORDER BY resource_index, scope_index
        ) = 1
    )
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
        kind, start_ns, end_ns,
        status_code, status_message,
        kv(rk, rv, 'service.name') AS service_name,
        kv(rk, rv, 'service.namespace') AS service_namespace,
        kv(rk, rv, 'service.instance.id') AS service_instance_id,
        coalesce(
            kv(rk, rv, 'deployment.environment.name'),
            kv(rk, rv, 'deployment.environment'),
            kv(ak, av, 'deployment.environment.name')
        ) AS environment,
        scope_name, scope_version,
        kv(ak, av, 'gen_ai.operation.name') AS gen_ai_operation,
        coalesce(kv(ak, av, 'gen_ai.provider.name'), kv(ak, av, 'gen_ai.system')) AS gen_ai_provider,
        kv(ak, av, 'gen_ai.request.model') AS request_model,
        kv(ak, av, 'gen_ai.response.model') AS response_model,
        coalesce(kv(ak, av, 'gen_ai.request.id'), kv(ak, av, 'gen_ai.response.id')) AS gen_ai_request_id,
        TRY_CAST(TRY_CAST(coalesce(kv(ak, av, 'gen_ai.usage.input_tokens'),
                                   kv(ak, av, 'gen_ai.usage.prompt_tokens')) AS DOUBLE) AS BIGINT) AS input_tokens,
        TRY_CAST(TRY_CAST(coalesce(kv(ak, av, 'gen_ai.usage.output_tokens'),
                                   kv(ak, av, 'gen_ai.usage.completion_tokens')) AS DOUBLE) AS BIGINT) AS output_tokens,
        TRY_CAST(TRY_CAST(coalesce(kv(ak, av, 'gen_ai.usage.cache_read.input_tokens'),
                                   kv(ak, av, 'gen_ai.usage.cached_tokens')) AS DOUBLE) AS BIGINT) AS cached_input_tokens,
        TRY_CAST(TRY_CAST(kv(ak, av, 'gen_ai.request.max_tokens') AS DOUBLE) AS BIGINT) AS request_max_tokens,
        kv(ak, av, 'gen_ai.response.finish_reasons') AS finish_reasons,
        TRY_CAST(kv(ak, av, 'gen_ai.latency.time_in_queue') AS DOUBLE) AS latency_queue_s,
        TRY_CAST(kv(ak, av, 'gen_ai.latency.time_to_first_token') AS DOUBLE) AS latency_ttft_s,
        TRY_CAST(kv(ak, av, 'gen_ai.latency.time_in_model_prefill') AS DOUBLE) AS latency_prefill_s,
        TRY_CAST(kv(ak, av, 'gen_ai.latency.time_in_model_decode') AS DOUBLE) AS latency_decode_s,
        TRY_CAST(kv(ak, av, 'gen_ai.latency.time_in_model_inference') AS DOUBLE) AS latency_inference_s,
        TRY_CAST(kv(ak, av, 'gen_ai.latency.e2e') AS DOUBLE) AS latency_e2e_s,
        coalesce(kv(ak, av, 'inferledger.app'), kv(rk, rv, 'inferledger.app')) AS app,
        coalesce(kv(ak, av, 'inferledger.team'), kv(rk, rv, 'inferledger.team')) AS team,
        coalesce(kv(ak, av, 'inferledger.route'), kv(ak, av, 'http.route')) AS route,
        kv(ak, av, 'inferledger.stage') AS stage,
        kv(ak, av, 'inferledger.task.id') AS task_id,
        coalesce(kv(ak, av, 'inferledger.workflow'), kv(rk, rv, 'inferledger.workflow')) AS workflow,
        TRY_CAST(TRY_CAST(kv(ak, av, 'inferledger.attempt') AS DOUBLE) AS INTEGER) AS attempt,
        TRY_CAST(kv(ak, av, 'inferledger.fallback') AS BOOLEAN) AS fallback,
        lower(kv(ak, av, 'inferledger.outcome')) AS outcome,
        TRY_CAST(kv(ak, av, 'inferledger.review.seconds') AS DOUBLE) AS review_s,
        attr_keys, attr_values, resource_keys, resource_values, events, links,
        dropped_attributes_count, dropped_events_count, dropped_links_count
    FROM new_spans
)

SELECT * FROM final
