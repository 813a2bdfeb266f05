-- Schema version 14 (#10 §4, the admin): a price version can be ended or superseded, and SLO
-- targets say where they were last entered (the file or the UI).
-- Formats and commands: docs/price-book.md ("Ending and superseding a version"), docs/deployments.md.

-- price_book.effective_to: an explicit end (NULL: the version applies until the next one starts).
-- The view prices_effective takes the earlier of this and the next version's effective_from, so
-- an ended version with no successor leaves its hours unpriced from effective_to on.
-- ledger/price_book.py refuses an end at or before the version's start, or after its successor's.
-- The table is rebuilt, not altered: DuckDB 2.0.1 replays an ALTER TABLE ... ADD COLUMN from the
-- WAL by binding the table's CHECKs again, before the extension holding isfinite() is loaded, and
-- then tries to download it: a crash before the next checkpoint left the file unopenable offline
-- (tests/test_durability.py caught it). CREATE, INSERT and RENAME replay cleanly.
CREATE TABLE price_book_v14 (
    price_id        BIGINT PRIMARY KEY DEFAULT nextval('price_book_price_id_seq'),
    kind            VARCHAR NOT NULL CHECK (kind IN ('gpu', 'model', 'service', 'reviewer')),
    subject         VARCHAR NOT NULL CHECK (subject <> ''),
    deployment      VARCHAR NOT NULL DEFAULT '',
    unit            VARCHAR NOT NULL CHECK (unit IN ('gpu_hour', 'input_mtok', 'cached_input_mtok',
                                                     'output_mtok', 'hour', 'call')),
    price           DOUBLE NOT NULL CHECK (price >= 0 AND isfinite(price)),
    currency        VARCHAR NOT NULL DEFAULT 'USD',
    stage           VARCHAR,
    effective_from  TIMESTAMPTZ NOT NULL,
    note            VARCHAR,
    source          VARCHAR NOT NULL CHECK (source IN ('seed', 'cli', 'ui', 'api')),
    created_at      TIMESTAMPTZ NOT NULL DEFAULT current_timestamp,
    effective_to    TIMESTAMPTZ,
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
INSERT INTO price_book_v14 (
    price_id, kind, subject, deployment, unit, price, currency, stage, effective_from, note,
    source, created_at
)
SELECT
    price_id, kind, subject, deployment, unit, price, currency, stage, effective_from, note,
    source, created_at
FROM price_book;
DROP TABLE price_book;
ALTER TABLE price_book_v14 RENAME TO price_book;

-- price_book_superseded: versions replaced by a corrected price from the same start. The
-- replacement takes the version's place in price_book (so the book's UNIQUE key still holds
-- one version per start); the mistaken one is kept here, never deleted, with who replaced it,
-- when, why and by which price_id.
CREATE TABLE price_book_superseded (
    price_id        BIGINT PRIMARY KEY,
    kind            VARCHAR NOT NULL,
    subject         VARCHAR NOT NULL,
    deployment      VARCHAR NOT NULL,
    unit            VARCHAR NOT NULL,
    price           DOUBLE NOT NULL,
    currency        VARCHAR NOT NULL,
    stage           VARCHAR,
    effective_from  TIMESTAMPTZ NOT NULL,
    effective_to    TIMESTAMPTZ,
    note            VARCHAR,
    source          VARCHAR NOT NULL,
    created_at      TIMESTAMPTZ NOT NULL,
    superseded_at   TIMESTAMPTZ NOT NULL DEFAULT current_timestamp,
    superseded_by   BIGINT NOT NULL,    -- the replacement's price_id
    changed_by      VARCHAR NOT NULL,
    reason          VARCHAR NOT NULL CHECK (reason <> '')
);

-- price_book_changes gains the actions 'end' and 'supersede', the end a change set or cleared
-- (old_/new_effective_to) and the reason given. DuckDB cannot alter a CHECK, so the table is
-- rebuilt with every row and change_id kept (the mart refresher's watermark is a change_id).
CREATE TABLE price_book_changes_v14 (
    change_id           BIGINT PRIMARY KEY DEFAULT nextval('price_book_changes_change_id_seq'),
    changed_at          TIMESTAMPTZ NOT NULL DEFAULT current_timestamp,
    changed_by          VARCHAR NOT NULL,
    action              VARCHAR NOT NULL CHECK (action IN ('insert', 'update', 'delete', 'end',
                                                           'supersede')),
    price_id            BIGINT NOT NULL,             -- may name a deleted or superseded version
    kind                VARCHAR NOT NULL,
    subject             VARCHAR NOT NULL,
    deployment          VARCHAR NOT NULL,
    unit                VARCHAR NOT NULL,
    old_price           DOUBLE,                      -- NULL for an insert
    new_price           DOUBLE,                      -- NULL for a delete or an end (none from then)
    effective_from      TIMESTAMPTZ NOT NULL,        -- earliest time affected
    note                VARCHAR,
    old_effective_from  TIMESTAMPTZ,                 -- NULL for an insert
    new_effective_from  TIMESTAMPTZ,                 -- NULL for a delete
    old_effective_to    TIMESTAMPTZ,                 -- the explicit end before the change
    new_effective_to    TIMESTAMPTZ,                 -- the explicit end after it
    reason              VARCHAR,                     -- why (required for end and supersede)
    CHECK ((old_price IS NULL) = (action = 'insert')),
    CHECK ((new_price IS NULL) = (action IN ('delete', 'end'))),
    CHECK (action NOT IN ('end', 'supersede') OR coalesce(reason, '') <> '')
);
INSERT INTO price_book_changes_v14 (
    change_id, changed_at, changed_by, action, price_id, kind, subject, deployment, unit,
    old_price, new_price, effective_from, note, old_effective_from, new_effective_from
)
SELECT
    change_id, changed_at, changed_by, action, price_id, kind, subject, deployment, unit,
    old_price, new_price, effective_from, note, old_effective_from, new_effective_from
FROM price_book_changes;
DROP TABLE price_book_changes;
ALTER TABLE price_book_changes_v14 RENAME TO price_book_changes;

-- slo_targets.source: 'config' for a target seeded from models/data/slo_targets.yaml, 'ui' once
-- an admin added or changed it on the Deployments page (as deployments.source does).
ALTER TABLE slo_targets ADD COLUMN source VARCHAR NOT NULL DEFAULT 'config';
