-- Schema version 8: business tasks with their outcome and everything they cost, the base of
-- unit economics (cost per accepted outcome, waste, retry/fallback/review shares, false economy).
-- Definitions: docs/cost-model.md ("Tasks and outcomes") and docs/unit-economics.md.
-- Derived data, like the ledger's marts: models/unit_economics.py recomputes a task whole from
-- mart_requests, mart_service_calls, mart_reviews, its spans' outcome and posted outcomes,
-- whenever a window of the ledger is refreshed or an outcome is posted for it.

-- mart_tasks: one row per task key (inferledger.task.id, else 'trace:' || trace_id). Costs are
-- under the `separate` idle policy (the idle_* columns are the task's idle shares under the
-- other policies). Every cost column is a sum of the task's rows in the three cost marts.
CREATE TABLE mart_tasks (
    task_key            VARCHAR NOT NULL,   -- unique by construction; no index (0006's note)
    environment         VARCHAR,
    app                 VARCHAR,
    team                VARCHAR,
    route               VARCHAR,
    workflow            VARCHAR,
    first_model         VARCHAR,            -- model of the first LLM call of the first attempt
    final_model         VARCHAR,            -- model of the task's last LLM call
    day                 DATE NOT NULL,      -- UTC day of first_start
    first_start_ns      BIGINT NOT NULL,    -- earliest start of the task's calls (LLM, services)
    last_end_ns         BIGINT NOT NULL,    -- latest end of the task's calls
    first_start         TIMESTAMPTZ NOT NULL,
    last_end            TIMESTAMPTZ NOT NULL,
    traces              INTEGER NOT NULL,   -- traces with a call of the task
    attempts            INTEGER NOT NULL,   -- distinct attempt numbers (a trace without one: its
                                            -- rank among the task's traces by start)
    retried             BOOLEAN NOT NULL,   -- attempts > 1
    llm_calls           INTEGER NOT NULL,
    failed_calls        INTEGER NOT NULL,   -- LLM calls with an error status
    fallback_calls      INTEGER NOT NULL,   -- LLM calls marked inferledger.fallback
    unpriced_calls      INTEGER NOT NULL,   -- LLM calls with no price (costed 0)
    service_calls       INTEGER NOT NULL,   -- retrieval and tool calls
    outcome             VARCHAR NOT NULL
        CHECK (outcome IN ('accepted', 'corrected', 'rejected', 'failed', 'pending')),
    outcome_source      VARCHAR CHECK (outcome_source IN ('posted', 'span')),  -- NULL: derived
    decided_at          TIMESTAMPTZ,        -- the decision's time; NULL when failed or pending
    review_s            DOUBLE NOT NULL,
    llm_cost            DOUBLE NOT NULL,    -- prefill + decode of every LLM call
    retrieval_cost      DOUBLE NOT NULL,
    tools_cost          DOUBLE NOT NULL,
    review_cost         DOUBLE NOT NULL,
    total_cost          DOUBLE NOT NULL,    -- llm + retrieval + tools + review
    idle_usage          DOUBLE NOT NULL,    -- idle shares of its LLM calls, `usage` policy
    idle_even           DOUBLE NOT NULL,    -- ... `even` policy
    idle_configured     DOUBLE NOT NULL,    -- ... each deployment's own policy
    retry_cost          DOUBLE NOT NULL,    -- LLM and service calls of attempts after the first
    fallback_cost       DOUBLE NOT NULL,    -- fallback LLM calls
    failed_cost         DOUBLE NOT NULL,    -- failed calls, and every call of a failed attempt
    input_tokens        BIGINT NOT NULL,
    cached_input_tokens BIGINT NOT NULL,
    output_tokens       BIGINT NOT NULL,
    refreshed_at        TIMESTAMPTZ NOT NULL DEFAULT current_timestamp
);
