-- Every index of runlane_runs costs each write of a run, and a lone trigger most:
-- PostgreSQL opens every index and compiles its predicate for each statement, and
-- a plain pending run entered four of them. Two go:
--
-- runlane_runs_claimable (queue, run_at) held the same rows as runlane_runs_claim_order
-- (migration 015) in due-time order. The claims read claim order since 015; the
-- statements that still looked for due runs by due time (the capacity locks' test
-- for a due run, the bounded queues' claim) now read claim_order up to the horizon
-- (now plus the widest priority window: no due run's claim time is later), as the
-- unbounded claim does.
--
-- runlane_runs_undelivered serves only lanes with a transport (tick's requests for
-- deliveries), yet every pending run of every lane wrote an entry to it. The schema
-- no longer holds it: migrate() creates it when the lane has a transport
-- (versioning.DELIVERY_INDEX), and a lane with a transport warns when it opens
-- without it. Once created it stays, as on SQLite (its migration 010).
DROP INDEX IF EXISTS {schema}.runlane_runs_claimable;
DROP INDEX IF EXISTS {schema}.runlane_runs_undelivered;
