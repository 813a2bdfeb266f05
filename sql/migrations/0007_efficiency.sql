-- Schema version 7: efficiency and latency marts (prefix cache, KV cache, GPU utilization,
-- latency by stage) and the SLO targets they are judged against. Definitions and formulas:
-- docs/efficiency.md and docs/cost-model.md ("Efficiency"). The marts are derived data, filled
-- hour by hour by models/efficiency.py from sql/marts/efficiency_*.sql; the views in sql/views
-- (cache_efficiency, kv_cache_hourly, latency_stages, slo_attainment, cache_by_app) read them.
-- No primary keys on marts whose key columns may be NULL (app, route, model of an
-- uninstrumented request): the contract tests check their grain instead.

-- mart_cache_hourly: one row per hour x vLLM replica (scrape target of kind 'vllm') with a
-- sample or counter increase in the hour. Counter columns are increases over the scrape
-- intervals that end in (hour, hour + 1 h], counter resets handled; gauge columns weigh each
-- sample by the seconds it stands for inside [hour, hour + 1 h).
CREATE TABLE mart_cache_hourly (
    hour                TIMESTAMPTZ NOT NULL,
    replica             VARCHAR NOT NULL,   -- the vLLM scrape target's name
    deployment          VARCHAR NOT NULL,   -- scrapes.deployment, else the replica's own name
    prefix_queries      DOUBLE NOT NULL,    -- tokens looked up in the prefix cache
    prefix_hits         DOUBLE NOT NULL,    -- tokens found there
    preemptions         DOUBLE NOT NULL,
    requests_finished   DOUBLE NOT NULL,    -- vllm:request_success, every finished_reason
    prompt_tokens       DOUBLE NOT NULL,    -- vllm:prompt_tokens (cached tokens included)
    generation_tokens   DOUBLE NOT NULL,
    samples             INTEGER NOT NULL,   -- scrape instants with a KV usage sample in the hour
    covered_s           DOUBLE NOT NULL,    -- seconds of the hour those samples stand for
    kv_usage_mean       DOUBLE,             -- time-weighted, 0..1; NULL when covered_s = 0
    kv_usage_p50        DOUBLE,             -- time-weighted percentiles (exact)
    kv_usage_p90        DOUBLE,
    kv_usage_max        DOUBLE,
    kv_usage_hist_s     DOUBLE[] NOT NULL,  -- 100 buckets: seconds with usage in [i/100, (i+1)/100)
    kv_high_s           DOUBLE NOT NULL,    -- seconds with KV usage >= 0.9
    waiting_s           DOUBLE NOT NULL,    -- seconds with a request waiting
    kv_bound_s          DOUBLE NOT NULL,    -- waiting while KV usage >= 0.9
    compute_bound_s     DOUBLE NOT NULL,    -- waiting while KV usage < 0.9
    running_mean        DOUBLE,             -- time-weighted mean of num_requests_running
    waiting_mean        DOUBLE,             -- time-weighted mean of num_requests_waiting
    PRIMARY KEY (hour, replica),
    CHECK (kv_bound_s + compute_bound_s <= waiting_s + 1e-6),
    CHECK (len(kv_usage_hist_s) = 100)
);

-- mart_gpu_hourly: one row per hour x dcgm-exporter target (a GPU node) with a
-- DCGM_FI_DEV_GPU_UTIL sample in the hour.
CREATE TABLE mart_gpu_hourly (
    hour            TIMESTAMPTZ NOT NULL,
    target          VARCHAR NOT NULL,       -- the dcgm scrape target's name
    deployment      VARCHAR NOT NULL,       -- scrapes.deployment, else the target's own name
    gpus            INTEGER NOT NULL,       -- GPU series seen in the hour
    gpu_covered_s   DOUBLE NOT NULL,        -- GPU-seconds the samples stand for
    gpu_util_mean   DOUBLE,                 -- time-weighted mean over the GPUs, 0..1
    gpu_util_max    DOUBLE,
    PRIMARY KEY (hour, target)
);

-- mart_latency_hourly: one row per hour x environment x app x route x stage: exact
-- percentiles of the successful requests (stages queue, prefill, ttft, decode, tpot, e2e) and
-- service calls (retrieval, tools) that started in the hour.
CREATE TABLE mart_latency_hourly (
    hour        TIMESTAMPTZ NOT NULL,
    environment VARCHAR,
    app         VARCHAR,
    route       VARCHAR,
    stage       VARCHAR NOT NULL CHECK (stage IN ('queue', 'retrieval', 'prefill', 'ttft',
                                                  'decode', 'tpot', 'tools', 'e2e')),
    count       BIGINT NOT NULL,
    sum_s       DOUBLE NOT NULL,
    min_s       DOUBLE NOT NULL,
    max_s       DOUBLE NOT NULL,
    p50_s       DOUBLE NOT NULL,    -- nearest rank: the ceil(q x count)-th smallest value
    p95_s       DOUBLE NOT NULL,
    p99_s       DOUBLE NOT NULL
);

-- mart_latency_buckets: one row per hour x environment x app x route x model x stage x
-- non-empty bucket: a mergeable histogram, so percentiles over any range need no raw spans.
-- Bucket 0 holds values below 1 ms, bucket 289 values of 1000 s and more; bucket b in 1..288
-- holds [1 ms x 10^((b-1)/48), 1 ms x 10^(b/48)) (48 buckets per decade, 4.9 % wide).
CREATE TABLE mart_latency_buckets (
    hour        TIMESTAMPTZ NOT NULL,
    environment VARCHAR,
    app         VARCHAR,
    route       VARCHAR,
    model       VARCHAR,
    stage       VARCHAR NOT NULL CHECK (stage IN ('queue', 'retrieval', 'prefill', 'ttft',
                                                  'decode', 'tpot', 'tools', 'e2e')),
    bucket      SMALLINT NOT NULL CHECK (bucket BETWEEN 0 AND 289),
    count       BIGINT NOT NULL CHECK (count > 0),
    sum_s       DOUBLE NOT NULL,
    min_s       DOUBLE NOT NULL,
    max_s       DOUBLE NOT NULL
);

-- mart_cache_by_app: one row per hour x app x route x model x deployment x hosting: the
-- requests' tokens and costs, for prefix-cache hit rates and unit costs by app and route.
CREATE TABLE mart_cache_by_app (
    hour                        TIMESTAMPTZ NOT NULL,
    app                         VARCHAR,
    route                       VARCHAR,
    model                       VARCHAR,
    deployment                  VARCHAR,        -- NULL for hosted and unpriced requests
    hosting                     VARCHAR NOT NULL,
    requests                    BIGINT NOT NULL,
    input_tokens                BIGINT NOT NULL,
    cache_reported_input_tokens BIGINT NOT NULL, -- input tokens of requests that report cached tokens
    cached_input_tokens         BIGINT NOT NULL,
    uncached_input_tokens       BIGINT NOT NULL, -- sum of max(input - cached, 0)
    output_tokens               BIGINT NOT NULL,
    prefill_cost                DOUBLE NOT NULL,
    decode_cost                 DOUBLE NOT NULL,
    prefill_gpu_s               DOUBLE NOT NULL,
    decode_gpu_s                DOUBLE NOT NULL,
    CHECK (cached_input_tokens <= cache_reported_input_tokens)
);

-- slo_targets: latency objectives, effective-dated like prices. One row per version of an
-- objective; the version in effect at t is the one with the latest effective_from <= t.
-- Seeded from models/data/slo_targets.yaml on first start; edit with SQL (later the UI).
CREATE SEQUENCE slo_target_ids START 1;
CREATE TABLE slo_targets (
    target_id       BIGINT PRIMARY KEY DEFAULT nextval('slo_target_ids'),
    objective       VARCHAR NOT NULL CHECK (objective <> ''),   -- a name: 'answer-ttft-p95'
    route           VARCHAR NOT NULL,   -- an SQL LIKE pattern ('/answer', '/%'); exact when no % or _
    app             VARCHAR,            -- NULL: every app on the route
    environment     VARCHAR,            -- NULL: every environment
    stage           VARCHAR NOT NULL CHECK (stage IN ('queue', 'retrieval', 'prefill', 'ttft',
                                                      'decode', 'tpot', 'tools', 'e2e')),
    percentile      DOUBLE NOT NULL CHECK (percentile > 0 AND percentile <= 1),
    target_s        DOUBLE NOT NULL CHECK (target_s > 0),
    effective_from  TIMESTAMPTZ NOT NULL,
    note            VARCHAR,
    created_at      TIMESTAMPTZ NOT NULL DEFAULT current_timestamp,
    UNIQUE (objective, effective_from)
);
