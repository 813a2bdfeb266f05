-- Schema version 15: SLO targets get an audit trail, and a removed target stays removed.
-- Formats and rules: docs/deployments.md ("SLO targets", "The SLO audit trail").
-- Written only through ledger/deployments.py (save, remove, restore) and
-- ledger/efficiency.py (the seed), each change in the same transaction as the write itself.

-- slo_target_changes: append-only, one row per change of slo_targets. The seed writes one
-- `seeded` row per target version it loads (changed_by 'seed'; an admin restoring the bundled
-- file writes `seeded` rows under their own name); a save writes `added` or `changed`; a
-- removal writes one `removed` row per objective, with its latest version's values.
-- old_values / new_values are JSON text objects (route, stage, percentile as a share,
-- target_s, app, environment, effective_from as ISO 8601, note, source; a removal adds
-- `versions`, how many versions went). Plain VARCHAR, not JSON: a CHECK calling json_valid()
-- would need the json extension while DuckDB 2.0.1 replays the WAL (see 0014).
-- The table also decides the seed: seed_slo_targets_if_empty seeds only while slo_targets is
-- empty AND this table has no row, so targets an admin removed stay removed after a restart.
-- A new table, not an ALTER (0014 explains DuckDB 2.0.1's WAL replay of ALTER with CHECKs).
CREATE SEQUENCE slo_target_changes_change_id_seq START 1;
CREATE TABLE slo_target_changes (
    change_id   BIGINT PRIMARY KEY DEFAULT nextval('slo_target_changes_change_id_seq'),
    changed_at  TIMESTAMPTZ NOT NULL DEFAULT current_timestamp,
    changed_by  VARCHAR NOT NULL CHECK (changed_by <> ''),
    action      VARCHAR NOT NULL CHECK (action IN ('seeded', 'added', 'changed', 'removed')),
    objective   VARCHAR NOT NULL CHECK (objective <> ''),
    old_values  VARCHAR,            -- NULL for seeded and added
    new_values  VARCHAR,            -- NULL for removed
    CHECK ((old_values IS NULL) = (action IN ('seeded', 'added'))),
    CHECK ((new_values IS NULL) = (action = 'removed'))
);
