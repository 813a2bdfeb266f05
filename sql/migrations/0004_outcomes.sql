-- Schema version 4: outcomes decided after the fact, by a reviewer or a downstream system, posted
-- to POST /v1/outcomes or imported from CSV (`inferledger outcomes import`). See docs/api.md
-- ("Outcomes") and docs/cost-model.md ("Tasks and outcomes").
--
-- outcomes: one row per posted decision, kept as received; a task may have several (a reviewer
-- changing their mind), and the task_outcome_decisions view picks the latest. A decision for a
-- task whose spans have not arrived yet is kept all the same and joins when they do.
-- No secondary index: the view reads the whole (small) table; the primary key is the
-- idempotency check of every write.
CREATE TABLE outcomes (
    outcome_id  VARCHAR PRIMARY KEY,    -- the client's `id`, else 'sha256:' + a hash of the content
    task_id     VARCHAR,                -- inferledger.task.id of the task's spans
    trace_id    VARCHAR CHECK (trace_id IS NULL OR regexp_full_match(trace_id, '[0-9a-f]{32}')),
    outcome     VARCHAR NOT NULL CHECK (outcome IN ('accepted', 'rejected', 'corrected')),
    review_s    DOUBLE CHECK (review_s >= 0),   -- human review time, seconds
    reviewer    VARCHAR,
    score       DOUBLE,                 -- optional quality score, any scale the client uses
    decided_at  TIMESTAMPTZ NOT NULL,   -- as given, else the time it was received
    source      VARCHAR NOT NULL CHECK (source IN ('api', 'csv')),
    received_at TIMESTAMPTZ NOT NULL DEFAULT current_timestamp,
    CHECK (task_id IS NOT NULL OR trace_id IS NOT NULL)
);
