-- Payloads are kept as json (their text, as written) rather than jsonb: jsonb stores
-- numbers as numeric, so a float such as 1e16 read back as the integer
-- 10000000000000000 and payloads differed between lanes. Payloads are never
-- queried into, so nothing needs jsonb's binary form. Payloads stored before this
-- version keep jsonb's rendering of them.
ALTER TABLE {schema}.runlane_runs ALTER COLUMN payload TYPE json USING payload::json;
