-- Schema version 6: the cost ledger's marts, kept fresh by the refresher (models/marts.py) and
-- read through the views in sql/views (request_costs, spend_daily, ...). See docs/cost-model.md.
-- Marts are derived data: every row can be recomputed from spans, scrapes, the price book,
-- deployments and outcomes, and the refresher does so hour by hour.

-- Scrapes arrive out of time order (history replays, late targets): the refresher finds the
-- hours to recompute by what was *received* since its last run.
ALTER TABLE scrapes ADD COLUMN received_at TIMESTAMPTZ DEFAULT current_timestamp;

-- mart_requests: one row per LLM request (an app-side GenAI client span, joined to its engine
-- span; or an engine span with no app-side parent). Costs are the sum of its hourly pieces.
CREATE TABLE mart_requests (
    trace_id            VARCHAR NOT NULL,
    span_id             VARCHAR NOT NULL,   -- the client span, else the engine span
    engine_span_id      VARCHAR,            -- NULL when no engine span (hosted API, uninstrumented)
    start_ns            BIGINT NOT NULL,
    end_ns              BIGINT NOT NULL,
    start_time          TIMESTAMPTZ NOT NULL,
    hour                TIMESTAMPTZ NOT NULL,   -- hour of start_time
    environment         VARCHAR,
    app                 VARCHAR,
    team                VARCHAR,
    route               VARCHAR,
    workflow            VARCHAR,
    task_key            VARCHAR NOT NULL,   -- inferledger.task.id, else 'trace:' || trace_id
    attempt             INTEGER,
    fallback            BOOLEAN NOT NULL,
    service_name        VARCHAR,            -- the calling service (the engine's when no client span)
    operation           VARCHAR,            -- gen_ai.operation.name
    provider            VARCHAR,
    model               VARCHAR,
    deployment          VARCHAR,
    replica             VARCHAR,
    hosting             VARCHAR NOT NULL CHECK (hosting IN ('self_hosted', 'hosted', 'unpriced')),
    failed              BOOLEAN NOT NULL,   -- error status on the client or engine span
    input_tokens        BIGINT,
    cached_input_tokens BIGINT,
    output_tokens       BIGINT,
    queue_s             DOUBLE,
    prefill_s           DOUBLE,             -- scheduled -> first token
    decode_s            DOUBLE,             -- first token -> last token
    ttft_s              DOUBLE,
    tpot_s              DOUBLE,             -- decode_s / (output_tokens - 1)
    e2e_s               DOUBLE,             -- the client span's duration, else the engine's e2e
    prefill_gpu_s       DOUBLE NOT NULL,
    decode_gpu_s        DOUBLE NOT NULL,
    prefill_cost        DOUBLE NOT NULL,    -- GPU usage, or input tokens x price for hosted
    decode_cost         DOUBLE NOT NULL,    -- GPU usage, or output tokens x price for hosted
    idle_usage_cost     DOUBLE NOT NULL,    -- idle share under the `usage` policy
    idle_even_cost      DOUBLE NOT NULL,    -- idle share under the `even` policy
    idle_configured_cost DOUBLE NOT NULL    -- idle share under the deployment's own policy
    -- (trace_id, span_id) is unique by construction (tests check it). No PRIMARY KEY: its ART
    -- index made each hourly refresh's delete + insert several times slower at 1M+ rows.
);

-- mart_request_pieces: one row per self-hosted request x hour x stage: the estimator's output
-- before it is summed per request, kept so an hour can be recomputed alone.
CREATE TABLE mart_request_pieces (
    trace_id    VARCHAR NOT NULL,
    span_id     VARCHAR NOT NULL,   -- the request's span_id in mart_requests
    hour        TIMESTAMPTZ NOT NULL,
    deployment  VARCHAR NOT NULL,
    replica     VARCHAR NOT NULL,
    stage       VARCHAR NOT NULL CHECK (stage IN ('prefill', 'decode')),
    gpu_s       DOUBLE NOT NULL,
    cost        DOUBLE NOT NULL,
    idle_usage  DOUBLE NOT NULL,    -- this piece's share of its deployment-hour's idle, by usage
    idle_even   DOUBLE NOT NULL,    -- ... equally per request
    idle_configured DOUBLE NOT NULL -- ... under the deployment's own policy
);

-- mart_replica_hours: one row per replica x hour the replica was up or served a request.
CREATE TABLE mart_replica_hours (
    hour        TIMESTAMPTZ NOT NULL,
    replica     VARCHAR NOT NULL,
    deployment  VARCHAR NOT NULL,
    gpus        INTEGER NOT NULL,
    up_s        DOUBLE NOT NULL,    -- seconds up (from scrapes)
    busy_s      DOUBLE NOT NULL,    -- seconds up with a request in prefill or decode
    total_cost  DOUBLE NOT NULL,    -- GPUs x price x up time
    usage_cost  DOUBLE NOT NULL,
    idle_cost   DOUBLE NOT NULL,    -- total_cost - usage_cost
    gpu_s       DOUBLE NOT NULL,    -- GPUs x up seconds
    usage_gpu_s DOUBLE NOT NULL,
    priced      BOOLEAN NOT NULL,   -- false when no GPU price or GPU type was found
    PRIMARY KEY (hour, replica)
);

-- mart_service_calls: one row per retrieval or tool span, priced.
CREATE TABLE mart_service_calls (
    trace_id    VARCHAR NOT NULL,
    span_id     VARCHAR NOT NULL,
    start_ns    BIGINT NOT NULL,
    hour        TIMESTAMPTZ NOT NULL,
    environment VARCHAR,
    app         VARCHAR,
    team        VARCHAR,
    route       VARCHAR,
    workflow    VARCHAR,
    task_key    VARCHAR NOT NULL,
    stage       VARCHAR NOT NULL CHECK (stage IN ('retrieval', 'tools')),
    service     VARCHAR NOT NULL,
    duration_s  DOUBLE NOT NULL,
    failed      BOOLEAN NOT NULL,
    cost        DOUBLE NOT NULL     -- (trace_id, span_id) unique by construction, no index
);

-- mart_service_hours: one row per hour x service with an hourly price: the hour's cost, spread
-- over that hour's calls by duration (mart_service_calls.cost includes it); unattributed when
-- the service had no call in the hour.
CREATE TABLE mart_service_hours (
    hour            TIMESTAMPTZ NOT NULL,
    service         VARCHAR NOT NULL,
    stage           VARCHAR NOT NULL CHECK (stage IN ('retrieval', 'tools')),
    cost            DOUBLE NOT NULL,
    calls           BIGINT NOT NULL,
    unattributed    DOUBLE NOT NULL,    -- cost when calls = 0, else 0
    PRIMARY KEY (hour, service)
);

-- mart_reviews: one row per task with review time, priced at the reviewer rate in effect when
-- the task ended; reported in the hour the task ended.
CREATE TABLE mart_reviews (
    task_key    VARCHAR NOT NULL,   -- unique by construction, no index (see mart_requests)
    hour        TIMESTAMPTZ NOT NULL,
    environment VARCHAR,
    app         VARCHAR,
    team        VARCHAR,
    route       VARCHAR,
    workflow    VARCHAR,
    reviewer    VARCHAR,
    review_s    DOUBLE NOT NULL,
    source      VARCHAR NOT NULL CHECK (source IN ('span', 'outcome')),
    cost        DOUBLE NOT NULL
);

-- mart_spend_hourly: one row per hour x slice x stage. For every stage but idle, the four
-- cost columns are equal. Idle rows: with app NULL, the idle not shared under that policy;
-- with app set, the app's share under that policy (0 under `separate`).
-- Conservation: for each policy, sum(cost_<policy>) = replica + hosted + service + review cost.
CREATE TABLE mart_spend_hourly (
    hour            TIMESTAMPTZ NOT NULL,
    environment     VARCHAR,
    app             VARCHAR,
    team            VARCHAR,
    route           VARCHAR,
    workflow        VARCHAR,
    model           VARCHAR,
    deployment      VARCHAR,
    stage           VARCHAR NOT NULL
        CHECK (stage IN ('prefill', 'decode', 'retrieval', 'tools', 'review', 'idle')),
    requests        BIGINT NOT NULL,
    input_tokens    BIGINT NOT NULL,
    output_tokens   BIGINT NOT NULL,
    cost_separate   DOUBLE NOT NULL,
    cost_usage      DOUBLE NOT NULL,
    cost_even       DOUBLE NOT NULL,
    cost_configured DOUBLE NOT NULL
);

-- mart_refresh_state: the refresher's watermarks (one row per name).
CREATE TABLE mart_refresh_state (
    name        VARCHAR PRIMARY KEY,
    value_ts    TIMESTAMPTZ,
    value_int   BIGINT,
    updated_at  TIMESTAMPTZ NOT NULL DEFAULT current_timestamp
);

-- mart_refresh_log: one row per refresh run, for operations and the benchmark.
CREATE TABLE mart_refresh_log (
    started_at  TIMESTAMPTZ NOT NULL,
    seconds     DOUBLE NOT NULL,
    hours       INTEGER NOT NULL,
    requests    BIGINT NOT NULL,
    trigger     VARCHAR NOT NULL
);
