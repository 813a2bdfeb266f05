-- Schema version 1: spans from OTLP/HTTP, and the attribute mapping rules.
-- spans: one row per span (trace_id, span_id), as received; typed columns for what the product
-- reads (see docs/attributes.md for every key and its fallback chain), everything else kept as
-- parallel key/value lists (values as text). Read them through the stg_spans view, which turns
-- them into the `attributes` and `resource_attributes` maps: storing lists keeps ingest fast
-- (DuckDB appends lists about 3x faster than it builds maps; see docs/benchmarks.md).
CREATE TABLE spans (
    trace_id                VARCHAR NOT NULL,   -- 32 lowercase hex characters
    span_id                 VARCHAR NOT NULL,   -- 16 lowercase hex characters
    parent_span_id          VARCHAR,            -- NULL for a root span
    trace_state             VARCHAR,
    flags                   BIGINT,
    name                    VARCHAR NOT NULL,
    kind                    INTEGER NOT NULL,   -- 0 unspecified, 1 internal, 2 server, 3 client, 4 producer, 5 consumer
    start_ns                BIGINT NOT NULL,    -- Unix epoch nanoseconds
    end_ns                  BIGINT NOT NULL,
    status_code             INTEGER NOT NULL,   -- 0 unset, 1 ok, 2 error
    status_message          VARCHAR,
    -- resource and scope identity
    service_name            VARCHAR,
    service_namespace       VARCHAR,
    service_instance_id     VARCHAR,
    environment             VARCHAR,            -- deployment.environment.name, deployment.environment
    scope_name              VARCHAR,
    scope_version           VARCHAR,
    -- OpenTelemetry GenAI semantic conventions (current names, then the older ones vLLM emits)
    gen_ai_operation        VARCHAR,            -- gen_ai.operation.name
    gen_ai_provider         VARCHAR,            -- gen_ai.provider.name, gen_ai.system
    request_model           VARCHAR,            -- gen_ai.request.model
    response_model          VARCHAR,            -- gen_ai.response.model
    gen_ai_request_id       VARCHAR,            -- gen_ai.request.id (vLLM), gen_ai.response.id
    input_tokens            BIGINT,             -- gen_ai.usage.input_tokens, gen_ai.usage.prompt_tokens
    output_tokens           BIGINT,             -- gen_ai.usage.output_tokens, gen_ai.usage.completion_tokens
    cached_input_tokens     BIGINT,             -- gen_ai.usage.cache_read.input_tokens, gen_ai.usage.cached_tokens
    request_max_tokens      BIGINT,             -- gen_ai.request.max_tokens
    finish_reasons          VARCHAR,            -- gen_ai.response.finish_reasons (JSON list as text)
    latency_queue_s         DOUBLE,             -- gen_ai.latency.time_in_queue
    latency_ttft_s          DOUBLE,             -- gen_ai.latency.time_to_first_token
    latency_prefill_s       DOUBLE,             -- gen_ai.latency.time_in_model_prefill
    latency_decode_s        DOUBLE,             -- gen_ai.latency.time_in_model_decode
    latency_inference_s     DOUBLE,             -- gen_ai.latency.time_in_model_inference
    latency_e2e_s           DOUBLE,             -- gen_ai.latency.e2e
    -- InferLedger's attribute convention (inferledger.*), span first, then resource
    app                     VARCHAR,
    team                    VARCHAR,
    route                   VARCHAR,
    stage                   VARCHAR,
    task_id                 VARCHAR,
    workflow                VARCHAR,
    attempt                 INTEGER,
    fallback                BOOLEAN,
    outcome                 VARCHAR,
    review_s                DOUBLE,
    -- everything else
    attr_keys               VARCHAR[] NOT NULL,
    attr_values             VARCHAR[] NOT NULL,
    resource_keys           VARCHAR[] NOT NULL,
    resource_values         VARCHAR[] NOT NULL,
    events                  VARCHAR,            -- JSON list, NULL when the span has none
    links                   VARCHAR,            -- JSON list, NULL when the span has none
    dropped_attributes_count BIGINT NOT NULL DEFAULT 0,
    dropped_events_count    BIGINT NOT NULL DEFAULT 0,
    dropped_links_count     BIGINT NOT NULL DEFAULT 0,
    received_at             TIMESTAMPTZ NOT NULL DEFAULT current_timestamp
);

-- Mapping rules are data: when `source_key` (a span attribute, or a resource attribute with
-- the "resource." prefix) matches `match` (an SQL LIKE pattern), `target` takes `value` unless
-- the span set it itself. Lower priority wins among several matching rules.
CREATE SEQUENCE attribute_mapping_ids START 1;
CREATE TABLE attribute_mappings (
    rule_id     BIGINT PRIMARY KEY DEFAULT nextval('attribute_mapping_ids'),
    target      VARCHAR NOT NULL CHECK (target IN ('app', 'team', 'route', 'workflow', 'environment', 'stage')),
    source_key  VARCHAR NOT NULL,
    match       VARCHAR NOT NULL,
    value       VARCHAR NOT NULL,
    priority    INTEGER NOT NULL DEFAULT 100,
    note        VARCHAR,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT current_timestamp
);
