-- Schema version 13: how far a background load of history has got (docs/demo.md), so that
-- every page can say "history loading: data complete back to <time>" instead of showing a
-- half-loaded range as a complete one. Written only through ledger/load_status.py.

-- load_status: one row per loader (`inferledger demo` writes name = 'demo-history'). While
-- `loading`, every span and scrape from `complete_from` up to now is stored and everything
-- before it back to `history_start` is still arriving; `costed_to` is how far the cost marts
-- have been refreshed over the loaded data. A finished load keeps its row with loading = false.
CREATE TABLE load_status (
    name           VARCHAR PRIMARY KEY,
    loading        BOOLEAN NOT NULL,
    history_start  TIMESTAMPTZ NOT NULL,   -- the oldest time the load will hold
    complete_from  TIMESTAMPTZ,            -- data complete from here on; NULL: nothing yet
    detail         VARCHAR NOT NULL DEFAULT '',  -- one line: what is loading now
    updated_at     TIMESTAMPTZ NOT NULL DEFAULT current_timestamp,
    CHECK (complete_from IS NULL OR complete_from >= history_start)
);
