-- ClickHouse schema version 1: the raw event tables (issue #15, first slice; docs/clickhouse.md).
-- The same column names as DuckDB's sql/migrations/0001_spans.sql, 0002_metrics.sql and
-- 0004_outcomes.sql, with types mapped: VARCHAR -> String (LowCardinality for names with few
-- distinct values), TIMESTAMPTZ -> DateTime64(6, 'UTC'), VARCHAR[] -> Array(String),
-- MAP(VARCHAR, VARCHAR) -> Map(String, String), BIGINT -> Int64, INTEGER -> Int32,
-- DOUBLE -> Float64, BOOLEAN -> Bool; Nullable exactly where DuckDB's column allows NULL.
--
-- Tables with a natural key are ReplacingMergeTree ordered by it, led by the hour: a row sent
-- twice is merged away (read with FINAL for an exact answer before the merge). Every table sets
-- non_replicated_deduplication_window, so an insert carrying an insert_deduplication_token seen
-- in its last 10,000 blocks is dropped: a replayed batch never doubles (without replication,
-- ClickHouse deduplicates only when this window is set). Partitions are days, so retention
-- (ALTER TABLE ... MODIFY TTL, applied by ClickHouseEvents from retention_days) drops whole
-- parts. Statements are split on ';' at line ends: no semicolons inside strings or comments.

CREATE TABLE IF NOT EXISTS spans (
    trace_id                String,
    span_id                 String,
    parent_span_id          Nullable(String),
    trace_state             Nullable(String),
    flags                   Nullable(Int64),
    name                    LowCardinality(String),
    kind                    Int32,
    start_ns                Int64,
    end_ns                  Int64,
    status_code             Int32,
    status_message          Nullable(String),
    service_name            LowCardinality(Nullable(String)),
    service_namespace       LowCardinality(Nullable(String)),
    service_instance_id     Nullable(String),
    environment             LowCardinality(Nullable(String)),
    scope_name              LowCardinality(Nullable(String)),
    scope_version           LowCardinality(Nullable(String)),
    gen_ai_operation        LowCardinality(Nullable(String)),
    gen_ai_provider         LowCardinality(Nullable(String)),
    request_model           LowCardinality(Nullable(String)),
    response_model          LowCardinality(Nullable(String)),
    gen_ai_request_id       Nullable(String),
    input_tokens            Nullable(Int64),
    output_tokens           Nullable(Int64),
    cached_input_tokens     Nullable(Int64),
    request_max_tokens      Nullable(Int64),
    finish_reasons          LowCardinality(Nullable(String)),
    latency_queue_s         Nullable(Float64),
    latency_ttft_s          Nullable(Float64),
    latency_prefill_s       Nullable(Float64),
    latency_decode_s        Nullable(Float64),
    latency_inference_s     Nullable(Float64),
    latency_e2e_s           Nullable(Float64),
    app                     LowCardinality(Nullable(String)),
    team                    LowCardinality(Nullable(String)),
    route                   LowCardinality(Nullable(String)),
    stage                   LowCardinality(Nullable(String)),
    task_id                 Nullable(String),
    workflow                LowCardinality(Nullable(String)),
    attempt                 Nullable(Int32),
    fallback                Nullable(Bool),
    outcome                 LowCardinality(Nullable(String)),
    review_s                Nullable(Float64),
    attr_keys               Array(LowCardinality(String)),
    attr_values             Array(String),
    resource_keys           Array(LowCardinality(String)),
    resource_values         Array(String),
    events                  Nullable(String),
    links                   Nullable(String),
    dropped_attributes_count Int64 DEFAULT 0,
    dropped_events_count    Int64 DEFAULT 0,
    dropped_links_count     Int64 DEFAULT 0,
    received_at             DateTime64(6, 'UTC') DEFAULT now64(6)
)
ENGINE = ReplacingMergeTree
PARTITION BY toDate(toDateTime(intDiv(start_ns, 1000000000), 'UTC'))
ORDER BY (intDiv(start_ns, 3600000000000), trace_id, span_id)
SETTINGS non_replicated_deduplication_window = 10000;

-- No natural key (DuckDB has none either): a plain MergeTree; a replay is stopped by the token.
CREATE TABLE IF NOT EXISTS metric_samples (
    ts          DateTime64(6, 'UTC'),
    target      LowCardinality(String),
    metric      LowCardinality(String),
    family      LowCardinality(String),
    type        LowCardinality(String),
    labels      Map(LowCardinality(String), String),
    series_key  String,
    le          Nullable(Float64),
    value       Float64
)
ENGINE = MergeTree
PARTITION BY toDate(ts)
ORDER BY (toStartOfHour(ts), target, metric, series_key, ts)
SETTINGS non_replicated_deduplication_window = 10000;

CREATE TABLE IF NOT EXISTS scrapes (
    ts          DateTime64(6, 'UTC'),
    target      LowCardinality(String),
    kind        LowCardinality(String),
    deployment  LowCardinality(Nullable(String)),
    url         String,
    up          Bool,
    duration_s  Float64,
    samples     Int32,
    http_status Nullable(Int32),
    error       Nullable(String),
    received_at Nullable(DateTime64(6, 'UTC')) DEFAULT now64(6)  -- added by DuckDB's 0006
)
ENGINE = ReplacingMergeTree
PARTITION BY toDate(ts)
ORDER BY (toStartOfHour(ts), target, ts)
SETTINGS non_replicated_deduplication_window = 10000;

-- Few rows (one per decision): partitioned by month, keyed by the decision's id alone.
CREATE TABLE IF NOT EXISTS outcomes (
    outcome_id  String,
    task_id     Nullable(String),
    trace_id    Nullable(String),
    outcome     LowCardinality(String),
    review_s    Nullable(Float64),
    reviewer    Nullable(String),
    score       Nullable(Float64),
    decided_at  DateTime64(6, 'UTC'),
    source      LowCardinality(String),
    received_at DateTime64(6, 'UTC') DEFAULT now64(6)
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(decided_at)
ORDER BY outcome_id
SETTINGS non_replicated_deduplication_window = 10000;
