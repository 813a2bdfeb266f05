-- one row per span of the decoded batch not already stored (trace_id, span_id); returns the count
-- Inputs registered by ingest/span_writer.py: batch_spans, batch_scopes, batch_resources (the
-- Arrow tables of ingest.otlp_decode.DecodedTraces, decoded with span_writer.SPAN_EXTRACT so that
-- the attributes the product reads arrive as text columns named "a:<key>" and the rest as
-- key/value lists) and $min_start / $max_start, the batch's start_ns range, which lets the
-- duplicate check prune storage blocks by their min/max. kv(keys, vals, k) reads a list pair like
-- a map (sql/macros/attribute_value.sql).
-- Attributes a fallback chain passes over go back into the lists (shadowed_key/value macros).
-- Integers are cast exactly first, then through DOUBLE for values sent as 12.0.
-- Typed columns follow docs/attributes.md: the current semantic-convention key first, then the
-- older name vLLM still emits, then (for our convention keys) the resource attribute.
INSERT INTO spans BY NAME
WITH resources AS (  -- resource-level columns, computed once per resource, not per span
    SELECT
        resource_index,
        resource_keys,
        resource_values,
        kv(resource_keys, resource_values, 'service.name') AS service_name,
        kv(resource_keys, resource_values, 'service.namespace') AS service_namespace,
        kv(resource_keys, resource_values, 'service.instance.id') AS service_instance_id,
        coalesce(
            kv(resource_keys, resource_values, 'deployment.environment.name'),
            kv(resource_keys, resource_values, 'deployment.environment')
        ) AS resource_environment,
        kv(resource_keys, resource_values, 'inferledger.app') AS resource_app,
        kv(resource_keys, resource_values, 'inferledger.team') AS resource_team,
        kv(resource_keys, resource_values, 'inferledger.workflow') AS resource_workflow
    FROM batch_resources
),

batch AS (
    SELECT s.*, r.* EXCLUDE (resource_index), sc.scope_name, sc.scope_version
    FROM batch_spans AS s
    JOIN resources AS r USING (resource_index)
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
        service_name, service_namespace, service_instance_id,
        coalesce(resource_environment, "a:deployment.environment.name") AS environment,
        scope_name, scope_version,
        "a:gen_ai.operation.name" AS gen_ai_operation,
        coalesce("a:gen_ai.provider.name", "a:gen_ai.system") AS gen_ai_provider,
        "a:gen_ai.request.model" AS request_model,
        "a:gen_ai.response.model" AS response_model,
        coalesce("a:gen_ai.request.id", "a:gen_ai.response.id") AS gen_ai_request_id,
        coalesce(TRY_CAST(coalesce("a:gen_ai.usage.input_tokens",
                                   "a:gen_ai.usage.prompt_tokens") AS BIGINT),
                 TRY_CAST(TRY_CAST(coalesce("a:gen_ai.usage.input_tokens",
                                   "a:gen_ai.usage.prompt_tokens") AS DOUBLE) AS BIGINT)) AS input_tokens,
        coalesce(TRY_CAST(coalesce("a:gen_ai.usage.output_tokens",
                                   "a:gen_ai.usage.completion_tokens") AS BIGINT),
                 TRY_CAST(TRY_CAST(coalesce("a:gen_ai.usage.output_tokens",
                                   "a:gen_ai.usage.completion_tokens") AS DOUBLE) AS BIGINT)) AS output_tokens,
        coalesce(TRY_CAST(coalesce("a:gen_ai.usage.cache_read.input_tokens",
                                   "a:gen_ai.usage.cached_tokens") AS BIGINT),
                 TRY_CAST(TRY_CAST(coalesce("a:gen_ai.usage.cache_read.input_tokens",
                                   "a:gen_ai.usage.cached_tokens") AS DOUBLE) AS BIGINT)) AS cached_input_tokens,
        TRY_CAST(TRY_CAST("a:gen_ai.request.max_tokens" AS DOUBLE) AS BIGINT) AS request_max_tokens,
        "a:gen_ai.response.finish_reasons" AS finish_reasons,
        TRY_CAST("a:gen_ai.latency.time_in_queue" AS DOUBLE) AS latency_queue_s,
        TRY_CAST("a:gen_ai.latency.time_to_first_token" AS DOUBLE) AS latency_ttft_s,
        TRY_CAST("a:gen_ai.latency.time_in_model_prefill" AS DOUBLE) AS latency_prefill_s,
        TRY_CAST("a:gen_ai.latency.time_in_model_decode" AS DOUBLE) AS latency_decode_s,
        TRY_CAST("a:gen_ai.latency.time_in_model_inference" AS DOUBLE) AS latency_inference_s,
        TRY_CAST("a:gen_ai.latency.e2e" AS DOUBLE) AS latency_e2e_s,
        coalesce("a:inferledger.app", resource_app) AS app,
        coalesce("a:inferledger.team", resource_team) AS team,
        coalesce("a:inferledger.route", "a:http.route") AS route,
        "a:inferledger.stage" AS stage,
        "a:inferledger.task.id" AS task_id,
        coalesce("a:inferledger.workflow", resource_workflow) AS workflow,
        TRY_CAST(TRY_CAST("a:inferledger.attempt" AS DOUBLE) AS INTEGER) AS attempt,
        TRY_CAST("a:inferledger.fallback" AS BOOLEAN) AS fallback,
        lower("a:inferledger.outcome") AS outcome,
        TRY_CAST("a:inferledger.review.seconds" AS DOUBLE) AS review_s,
        attr_keys
            || shadowed_key(attr_keys, "a:gen_ai.provider.name", 'gen_ai.system', "a:gen_ai.system")
            || shadowed_key(attr_keys, "a:gen_ai.request.id", 'gen_ai.response.id', "a:gen_ai.response.id")
            || shadowed_key(attr_keys, "a:gen_ai.usage.input_tokens", 'gen_ai.usage.prompt_tokens', "a:gen_ai.usage.prompt_tokens")
            || shadowed_key(attr_keys, "a:gen_ai.usage.output_tokens", 'gen_ai.usage.completion_tokens', "a:gen_ai.usage.completion_tokens")
            || shadowed_key(attr_keys, "a:gen_ai.usage.cache_read.input_tokens", 'gen_ai.usage.cached_tokens', "a:gen_ai.usage.cached_tokens")
            || shadowed_key(attr_keys, "a:inferledger.route", 'http.route', "a:http.route")
            || shadowed_key(attr_keys, resource_environment, 'deployment.environment.name',
                            "a:deployment.environment.name") AS attr_keys,
        attr_values
            || shadowed_value(attr_keys, "a:gen_ai.provider.name", 'gen_ai.system', "a:gen_ai.system")
            || shadowed_value(attr_keys, "a:gen_ai.request.id", 'gen_ai.response.id', "a:gen_ai.response.id")
            || shadowed_value(attr_keys, "a:gen_ai.usage.input_tokens", 'gen_ai.usage.prompt_tokens', "a:gen_ai.usage.prompt_tokens")
            || shadowed_value(attr_keys, "a:gen_ai.usage.output_tokens", 'gen_ai.usage.completion_tokens', "a:gen_ai.usage.completion_tokens")
            || shadowed_value(attr_keys, "a:gen_ai.usage.cache_read.input_tokens", 'gen_ai.usage.cached_tokens', "a:gen_ai.usage.cached_tokens")
            || shadowed_value(attr_keys, "a:inferledger.route", 'http.route', "a:http.route")
            || shadowed_value(attr_keys, resource_environment, 'deployment.environment.name',
                              "a:deployment.environment.name") AS attr_values,
        resource_keys, resource_values, events, links,
        dropped_attributes_count, dropped_events_count, dropped_links_count
    FROM new_spans
)

SELECT * FROM final
