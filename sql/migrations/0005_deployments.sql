-- Schema version 5: deployments (configured, set in the UI, or discovered from scrapes) and
-- replicas (vLLM scrape targets, with what their scrapes and spans tell about them).
-- The deployment_replicas view joins them, config over learned; see docs/deployments.md.

-- deployments: one row per deployment name. `source` says who owns the row:
--   config      the `deployments` setting; rewritten at every start, deleted when removed there
--   ui          created by a user action (set_idle_policy on a deployment no config names)
--   discovered  a deployment name seen on a scrape target (scrapes.deployment), nothing set yet
-- Every value column may be NULL: NULL means "not configured", and the learned value (or a
-- default) is used instead.
CREATE TABLE deployments (
    deployment          VARCHAR PRIMARY KEY,
    model               VARCHAR,            -- served model name, as vLLM's model_name label
    gpu_type            VARCHAR,            -- a GPU catalog name (as the price book): H200, H100-SXM, ...
    gpus_per_replica    INTEGER CHECK (gpus_per_replica > 0),
    tensor_parallel     INTEGER CHECK (tensor_parallel > 0),
    idle_policy         VARCHAR NOT NULL DEFAULT 'separate'
                        CHECK (idle_policy IN ('separate', 'usage', 'even')),
    environment         VARCHAR,
    source              VARCHAR NOT NULL CHECK (source IN ('config', 'ui', 'discovered')),
    updated_at          TIMESTAMPTZ NOT NULL DEFAULT current_timestamp
);

-- replicas: one row per vLLM scrape target (scrapes.kind = 'vllm'). Engine spans name their
-- replica with resource service.instance.id, which must equal this name. Written only by
-- models.deployments.learn_replicas; every learned column stays NULL until something tells it.
CREATE TABLE replicas (
    replica             VARCHAR PRIMARY KEY, -- the vLLM scrape target's name
    deployment          VARCHAR,            -- scrapes.deployment of its latest scrape that had one
    model               VARCHAR,            -- vLLM's model_name label
    gpu_type            VARCHAR,            -- dcgm_model_name as a GPU catalog name
    dcgm_model_name     VARCHAR,            -- DCGM's modelName as exported ('NVIDIA H200')
    block_size          INTEGER,            -- vllm:cache_config_info
    num_gpu_blocks      BIGINT,             -- vllm:cache_config_info
    cache_dtype         VARCHAR,            -- vllm:cache_config_info
    prefix_caching      BOOLEAN,            -- vllm:cache_config_info enable_prefix_caching
    host                VARCHAR,            -- host.name of its engine spans
    first_seen          TIMESTAMPTZ,        -- its first successful scrape
    last_seen           TIMESTAMPTZ,        -- its latest successful scrape
    learned_at          TIMESTAMPTZ NOT NULL DEFAULT current_timestamp
);
