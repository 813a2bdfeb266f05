-- Schema version 10: an hourly rollup of the task mart, so outcome_economics and the Unit
-- economics page answer from a few thousand rows instead of millions of tasks (at 10M
-- requests, aggregating mart_tasks per query took 0.2-4 s; the rollup answers in milliseconds).
-- And failed requests counted in the hourly spend, for the Overview's failure rate.

-- mart_outcomes_hourly: one row per hour (of the task's first start) x workflow x app x route x
-- team x environment x first model x final model: the sums of task_outcomes. Refreshed with
-- the tasks (sql/marts/tasks.sql): every hour a recomputed task counts in, whole.
CREATE TABLE mart_outcomes_hourly (
    hour                    TIMESTAMPTZ NOT NULL,
    workflow                VARCHAR,
    app                     VARCHAR,
    route                   VARCHAR,
    team                    VARCHAR,
    environment             VARCHAR,
    first_model             VARCHAR,
    final_model             VARCHAR,
    tasks                   BIGINT NOT NULL,
    accepted                BIGINT NOT NULL,
    corrected               BIGINT NOT NULL,
    rejected                BIGINT NOT NULL,
    failed                  BIGINT NOT NULL,
    pending                 BIGINT NOT NULL,
    retried_tasks           BIGINT NOT NULL,
    llm_calls               BIGINT,
    failed_calls            BIGINT,
    fallback_calls          BIGINT,
    unpriced_calls          BIGINT,
    input_tokens            BIGINT,
    output_tokens           BIGINT,
    tokens                  BIGINT,
    review_s                DOUBLE,
    llm_cost                DOUBLE,
    retrieval_cost          DOUBLE,
    tools_cost              DOUBLE,
    review_cost             DOUBLE,
    total_cost              DOUBLE,
    total_cost_usage        DOUBLE,
    total_cost_even         DOUBLE,
    total_cost_configured   DOUBLE,
    retry_cost              DOUBLE,
    fallback_cost           DOUBLE,
    failed_cost             DOUBLE,
    waste_cost              DOUBLE,
    -- waste in disjoint parts: rejected tasks, failed tasks, failed calls of the others
    rejected_cost           DOUBLE,
    failed_task_cost        DOUBLE,
    failed_call_cost        DOUBLE
);

ALTER TABLE mart_spend_hourly ADD COLUMN failed_requests BIGINT DEFAULT 0;
