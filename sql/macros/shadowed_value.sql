-- shadowed_value(keys, winner, key, value): [value] in the same cases as shadowed_key; else [].
CREATE OR REPLACE MACRO shadowed_value(keys, winner, k, v) AS
    CASE WHEN winner IS NOT NULL AND v IS NOT NULL AND NOT list_contains(keys, k)
         THEN [v] ELSE []::VARCHAR[] END;
