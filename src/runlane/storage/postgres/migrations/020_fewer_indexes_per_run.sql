-- Every index of runlane_runs costs each write of a run, and a lone trigger most:
-- PostgreSQL opens every index and compiles its predicate for each statement, and
-- a plain pending run entered four of them. Three go:
--
-- runlane_runs_claimable (queue, run_at) held the same rows as runlane_runs_claim_order
-- (migration 015) in due-time order. The claims read claim order since 015; the
-- statements that still looked for due runs by due time (the capacity locks' test
-- for a due run, the bounded queues' claim) now read claim_order up to the horizon
-- (now plus the widest priority window: no due run's claim time is later), as the
-- unbounded claim does.
--
-- runlane_runs_undelivered and runlane_runs_reserved serve only lanes with a
-- transport (tick's requests for deliveries, and the dispatch reservations it
-- expires), yet every write of a run of any lane paid for them, and every waiting
-- run wrote an entry to the first. The schema no longer holds them: migrate()
-- creates them when the lane has a transport (versioning.DELIVERY_INDEXES), and a
-- lane with a transport warns when it opens without them. Once created they stay,
-- as on SQLite (its migration 010).
DROP INDEX IF EXISTS {schema}.runlane_runs_claimable;
DROP INDEX IF EXISTS {schema}.runlane_runs_undelivered;
DROP INDEX IF EXISTS {schema}.runlane_runs_reserved;
