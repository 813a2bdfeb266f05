-- Schema version 18 (issue #14): the SQL console's saved queries and query history. Written
-- only through ledger/console.py; docs/sql-console.md describes them.
-- The SQL text is stored as the analyst typed it (it runs only in the console's sandbox).

-- console_queries: one row per saved query, owned by the user who saved it. share_id: a random
-- token (URL-safe) that opens the query for any analyst at /sql?q=<share_id>; unique. A name is
-- unique per owner (saving under the same name replaces the SQL). Deleted queries are removed.
CREATE SEQUENCE console_query_ids START 1;
CREATE TABLE console_queries (
    query_id    BIGINT PRIMARY KEY DEFAULT nextval('console_query_ids'),
    owner       VARCHAR NOT NULL CHECK (owner <> ''),
    name        VARCHAR NOT NULL CHECK (name <> ''),
    sql         VARCHAR NOT NULL CHECK (sql <> ''),
    share_id    VARCHAR NOT NULL UNIQUE CHECK (length(share_id) >= 16),
    created_at  TIMESTAMPTZ NOT NULL DEFAULT current_timestamp,
    updated_at  TIMESTAMPTZ NOT NULL DEFAULT current_timestamp,
    UNIQUE (owner, name)
);

-- console_history: one row per query a user ran in the console (kept: the last
-- console.history_size per user, older rows are deleted as new ones arrive). outcome: what the
-- sandbox answered (ok, refused, error, timeout, memory, killed, busy); rows: rows returned;
-- reason: the refusal or error shown, NULL when ok.
CREATE SEQUENCE console_history_ids START 1;
CREATE TABLE console_history (
    run_id      BIGINT PRIMARY KEY DEFAULT nextval('console_history_ids'),
    user_name   VARCHAR NOT NULL CHECK (user_name <> ''),
    ran_at      TIMESTAMPTZ NOT NULL DEFAULT current_timestamp,
    sql         VARCHAR NOT NULL,
    outcome     VARCHAR NOT NULL CHECK (outcome IN
                    ('ok', 'refused', 'error', 'timeout', 'memory', 'killed', 'busy')),
    rows        BIGINT NOT NULL DEFAULT 0,
    elapsed_ms  DOUBLE NOT NULL DEFAULT 0,
    reason      VARCHAR
);
CREATE INDEX console_history_user ON console_history (user_name, run_id);
