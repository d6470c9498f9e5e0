-- Idle workers standing by for hand-offs from lone triggers (migration 011; the
-- trigger's side is insert_run_handoff in runs.sql).

-- name: stand_by
-- Offer a worker's free slots on its unbounded queues.
INSERT INTO {schema}.runlane_standby (
    environment, lease_token, worker_id, queues, free, lease_micros, channel, lock_key
)
VALUES (
    %(environment)s, %(lease_token)s, %(worker_id)s, %(queues)s::text[], %(free)s,
    %(lease_micros)s, %(channel)s, %(lock_key)s
);

-- name: stand_down
-- Withdraw an offer and return the runs handed to it. A trigger taking a slot holds
-- the offer's row until it commits, so the DELETE waits for it and returns every
-- run handed over. An offer already removed (its listener was lost and tick removed
-- it as dead) is answered from the runs leased under its token.
WITH gone AS (
    DELETE FROM {schema}.runlane_standby
    WHERE environment = %(environment)s AND lease_token = %(lease_token)s
    RETURNING handed
)
SELECT coalesce(
    (SELECT handed FROM gone),
    ARRAY(
        SELECT r.id FROM {schema}.runlane_runs r
        WHERE r.environment = %(environment)s
          AND r.status IN ('running', 'cancellation_requested')
          AND r.lease_token = %(lease_token)s
    )
) AS handed;

-- name: handed_runs
-- Runs handed to an offer whose notification did not carry them (too large, or the
-- listening connection was lost): still leased under its token.
SELECT * FROM {schema}.runlane_runs
WHERE environment = %(environment)s AND id = ANY(%(ids)s::text[])
  AND lease_token = %(lease_token)s
  AND status IN ('running', 'cancellation_requested');

-- name: remove_dead_offers
-- tick: offers of listeners that are gone (their lock is free, so a shared lock is
-- granted). No trigger takes them, but each trigger looking for an offer scans them.
DELETE FROM {schema}.runlane_standby
WHERE environment = %(environment)s AND pg_try_advisory_xact_lock_shared(lock_key);
