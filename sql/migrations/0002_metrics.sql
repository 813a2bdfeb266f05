-- Schema version 2: samples scraped from Prometheus-text endpoints (vLLM, dcgm-exporter, ...),
-- one row per scrape attempt, and vLLM's metric renames as data. See docs/metrics.md.

-- metric_samples: one row per sample as exported (per target, metric, label set, timestamp).
-- No index: every read scans by time range and metric, which DuckDB's per-row-group min/max
-- (zonemaps) already prunes; an ART index would only slow the insert path (docs/metrics.md).
CREATE TABLE metric_samples (
    ts          TIMESTAMPTZ NOT NULL,       -- the sample's own timestamp, else the scrape's start
    target      VARCHAR NOT NULL,           -- scrape.targets[].name
    metric      VARCHAR NOT NULL,           -- sample name as exported: vllm:prompt_tokens_total, ..._bucket
    family      VARCHAR NOT NULL,           -- metric family: vllm:prompt_tokens, vllm:e2e_request_latency_seconds
    type        VARCHAR NOT NULL CHECK (type IN ('counter', 'gauge', 'histogram', 'summary',
                                                 'info', 'stateset', 'gaugehistogram', 'unknown')),
    labels      MAP(VARCHAR, VARCHAR) NOT NULL,  -- every label, `le` included for buckets
    series_key  VARCHAR NOT NULL,           -- sorted labels without a bucket's `le`: engine="0",model_name="m"
    le          DOUBLE,                     -- a histogram bucket's upper bound (+Inf included); NULL otherwise
    value       DOUBLE NOT NULL
);

-- scrapes: one row per scrape attempt, failed ones included (up = false, error set, no samples).
CREATE TABLE scrapes (
    ts          TIMESTAMPTZ NOT NULL,       -- when the scrape started
    target      VARCHAR NOT NULL,
    kind        VARCHAR NOT NULL,           -- vllm, dcgm or prometheus
    deployment  VARCHAR,                    -- scrape.targets[].deployment
    url         VARCHAR NOT NULL,
    up          BOOLEAN NOT NULL,
    duration_s  DOUBLE NOT NULL,            -- fetch + parse (storing is not included)
    samples     INTEGER NOT NULL,           -- samples stored (0 when the scrape failed)
    http_status INTEGER,                    -- NULL when no HTTP answer came back
    error       VARCHAR,                    -- NULL when up
    PRIMARY KEY (target, ts),               -- a replayed scrape is refused, not stored twice
    CHECK (up = (error IS NULL))
);

-- metric_name_aliases: exported names that vLLM renamed (../shared/reference/vllm-observability.md
-- section 1f). Both sample names and family names are listed: stg_metric_samples maps `metric`
-- and `family` through this table. Data, not code: add a row when an exporter renames a metric.
CREATE TABLE metric_name_aliases (
    old_name    VARCHAR PRIMARY KEY,
    new_name    VARCHAR NOT NULL,
    note        VARCHAR,
    CHECK (old_name <> new_name)
);

INSERT INTO metric_name_aliases (old_name, new_name, note) VALUES
    ('vllm:gpu_cache_usage_perc', 'vllm:kv_cache_usage_perc',
     'gauge; deprecated in vLLM 0.9, hidden in 0.11, removed in 0.12'),
    ('vllm:gpu_prefix_cache_queries', 'vllm:prefix_cache_queries',
     'counter family; deprecated in vLLM 0.9'),
    ('vllm:gpu_prefix_cache_queries_total', 'vllm:prefix_cache_queries_total',
     'counter sample; deprecated in vLLM 0.9'),
    ('vllm:gpu_prefix_cache_hits', 'vllm:prefix_cache_hits',
     'counter family; deprecated in vLLM 0.9'),
    ('vllm:gpu_prefix_cache_hits_total', 'vllm:prefix_cache_hits_total',
     'counter sample; deprecated in vLLM 0.9'),
    ('vllm:time_per_output_token_seconds', 'vllm:inter_token_latency_seconds',
     'histogram family; deprecated in vLLM 0.11, hidden in 0.12, removed in 0.13'),
    ('vllm:time_per_output_token_seconds_bucket', 'vllm:inter_token_latency_seconds_bucket',
     'histogram sample'),
    ('vllm:time_per_output_token_seconds_sum', 'vllm:inter_token_latency_seconds_sum',
     'histogram sample'),
    ('vllm:time_per_output_token_seconds_count', 'vllm:inter_token_latency_seconds_count',
     'histogram sample');
