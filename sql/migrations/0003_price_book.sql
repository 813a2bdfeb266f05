-- Schema version 3: the price book (effective-dated prices) and its append-only audit trail.
-- Definitions: docs/cost-model.md "Price book"; file format and CLI: docs/price-book.md.
-- Only models/price_book.py writes these tables, and it writes one price_book_changes row per
-- insert, update or delete of price_book in the same transaction (DuckDB has no triggers).

CREATE SEQUENCE price_book_price_id_seq START 1;
CREATE SEQUENCE price_book_changes_change_id_seq START 1;

-- price_book: one row per price version (kind, subject, deployment, unit, effective_from).
-- The price in effect at t is the version with the latest effective_from <= t; the view
-- prices_effective adds each version's effective_to.
CREATE TABLE price_book (
    price_id        BIGINT PRIMARY KEY DEFAULT nextval('price_book_price_id_seq'),
    kind            VARCHAR NOT NULL CHECK (kind IN ('gpu', 'model', 'service', 'reviewer')),
    subject         VARCHAR NOT NULL CHECK (subject <> ''),  -- GPU type, model, service key, reviewer or '*'
    deployment      VARCHAR NOT NULL DEFAULT '',   -- gpu overrides only; '' = fleet-wide
    unit            VARCHAR NOT NULL CHECK (unit IN ('gpu_hour', 'input_mtok', 'cached_input_mtok',
                                                     'output_mtok', 'hour', 'call')),
    price           DOUBLE NOT NULL CHECK (price >= 0 AND isfinite(price)),
    currency        VARCHAR NOT NULL DEFAULT 'USD',
    stage           VARCHAR,                       -- services only: where an unattributed hour goes
    effective_from  TIMESTAMPTZ NOT NULL,
    note            VARCHAR,
    source          VARCHAR NOT NULL CHECK (source IN ('seed', 'cli', 'ui', 'api')),
    created_at      TIMESTAMPTZ NOT NULL DEFAULT current_timestamp,
    UNIQUE (kind, subject, deployment, unit, effective_from),
    CHECK (CASE kind
               WHEN 'gpu' THEN unit = 'gpu_hour'
               WHEN 'model' THEN unit IN ('input_mtok', 'cached_input_mtok', 'output_mtok')
               WHEN 'service' THEN unit IN ('hour', 'call')
               WHEN 'reviewer' THEN unit = 'hour'
           END),
    CHECK (deployment = '' OR kind = 'gpu'),
    CHECK ((kind = 'service') = (stage IS NOT NULL)),
    CHECK (stage IS NULL OR stage IN ('retrieval', 'tools'))
);

-- price_book_changes: append-only, one row per change of price_book. The mart refresher reads
-- rows with change_id > its watermark and re-prices from min(effective_from): effective_from is
-- the earliest time the change affects (for an update that moves a version, the earlier of the
-- old and new effective_from; both are kept in old_/new_effective_from). change_id grows in
-- commit order (one writer); a rolled-back write may leave a gap.
CREATE TABLE price_book_changes (
    change_id           BIGINT PRIMARY KEY DEFAULT nextval('price_book_changes_change_id_seq'),
    changed_at          TIMESTAMPTZ NOT NULL DEFAULT current_timestamp,
    changed_by          VARCHAR NOT NULL,
    action              VARCHAR NOT NULL CHECK (action IN ('insert', 'update', 'delete')),
    price_id            BIGINT NOT NULL,             -- may name a deleted version
    kind                VARCHAR NOT NULL,
    subject             VARCHAR NOT NULL,
    deployment          VARCHAR NOT NULL,
    unit                VARCHAR NOT NULL,
    old_price           DOUBLE,                      -- NULL for an insert
    new_price           DOUBLE,                      -- NULL for a delete
    effective_from      TIMESTAMPTZ NOT NULL,        -- earliest time affected
    note                VARCHAR,
    old_effective_from  TIMESTAMPTZ,                 -- NULL for an insert
    new_effective_from  TIMESTAMPTZ,                 -- NULL for a delete
    CHECK ((old_price IS NULL) = (action = 'insert')),
    CHECK ((new_price IS NULL) = (action = 'delete'))
);
