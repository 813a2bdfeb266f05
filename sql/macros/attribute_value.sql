-- kv(keys, vals, k): the value stored under key k in parallel key/value lists, NULL if absent.
-- Spans keep attributes as lists (faster to ingest than maps); this reads them like a map.
CREATE OR REPLACE MACRO kv(keys, vals, k) AS vals[list_position(keys, k)];
