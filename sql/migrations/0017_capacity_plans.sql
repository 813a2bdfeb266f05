-- Schema version 17 (issue #13): saved capacity plans and their decision trail. Written only
-- through ledger/capacity_plans.py; docs/capacity-planner.md describes the plan's JSON.
-- No isfinite() in CHECKs (see 0014: DuckDB 2.0.1's WAL replay); the store checks finiteness.
-- JSON columns are VARCHAR holding a JSON object, written and read by the store (see 0015).

-- capacity_plans: one row per saved plan. inputs: the plan's fully resolved inputs (profile,
-- knobs, SLOs, candidate space, seed, ...) as JSON; result: the whole result mapping that
-- models/capacity/plan.py's run_plan returned (inputs included), so a plan reopens exactly as
-- it was run. summary: the few figures the list shows (totals, each pool's recommendation),
-- kept beside the result so listing plans does not parse every result. planner_version and
-- model_version say which planner and which step-time calibration produced the numbers.
-- decision: the decision record's field (advance / revise / stop), NULL until someone decides;
-- decided_by / decided_at are set with it. Names need not be unique (a scenario re-run is a new
-- plan); plans are archived, never deleted.
CREATE SEQUENCE capacity_plan_ids START 1;
CREATE TABLE capacity_plans (
    plan_id         BIGINT PRIMARY KEY DEFAULT nextval('capacity_plan_ids'),
    name            VARCHAR NOT NULL CHECK (name <> ''),
    created_by      VARCHAR NOT NULL CHECK (created_by <> ''),
    created_at      TIMESTAMPTZ NOT NULL DEFAULT current_timestamp,
    planner_version VARCHAR NOT NULL,
    model_version   VARCHAR NOT NULL,
    inputs          VARCHAR NOT NULL,
    result          VARCHAR NOT NULL,
    summary         VARCHAR NOT NULL DEFAULT '{}',
    owner           VARCHAR,
    decision        VARCHAR CHECK (decision IS NULL OR decision IN ('advance', 'revise', 'stop')),
    decision_note   VARCHAR,
    decided_by      VARCHAR,
    decided_at      TIMESTAMPTZ,
    archived_at     TIMESTAMPTZ,
    CHECK ((decision IS NULL) = (decided_at IS NULL)),
    CHECK ((decision IS NULL) = (decided_by IS NULL))
);

-- capacity_plan_changes: the audit trail of saved plans (saved, decided, archived, restored):
-- who, when, and the values the change set as JSON, written in the same transaction.
CREATE SEQUENCE capacity_plan_change_ids START 1;
CREATE TABLE capacity_plan_changes (
    change_id   BIGINT PRIMARY KEY DEFAULT nextval('capacity_plan_change_ids'),
    changed_at  TIMESTAMPTZ NOT NULL DEFAULT current_timestamp,
    changed_by  VARCHAR NOT NULL CHECK (changed_by <> ''),
    plan_id     BIGINT NOT NULL,
    action      VARCHAR NOT NULL CHECK (action IN ('saved', 'decided', 'archived', 'restored')),
    detail      VARCHAR
);
