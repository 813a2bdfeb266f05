-- shadowed_key(keys, winner, key, value): [key] when a fallback chain passed over the attribute
-- key (its winner is set too) and the decoder took it out of the span's key list; else [].
-- insert_spans appends these so an attribute a fallback chain did not use is still stored.
CREATE OR REPLACE MACRO shadowed_key(keys, winner, k, v) AS
    CASE WHEN winner IS NOT NULL AND v IS NOT NULL AND NOT list_contains(keys, k)
         THEN [k] ELSE []::VARCHAR[] END;
