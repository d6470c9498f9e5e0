-- A run's run.started and run.succeeded events are implied by its row, as run.created
-- is since 004: a drained run writes one row, not three. The row keeps what those
-- events carry: the latest start (its event sequence and time, the worker and the
-- lease expiry it started with; the attempt is the row's) and, when that attempt
-- succeeded, the success's sequence and time. Runs written before this version have
-- these columns NULL and keep their stored events; a start the row can no longer
-- imply (its run is to be claimed again) is stored as a row by the transition that
-- makes it claimable, and a stored event always wins over an implied one of the
-- same sequence, so nothing is listed twice.
ALTER TABLE {schema}.runlane_runs
    ADD COLUMN IF NOT EXISTS started_sequence INTEGER,
    ADD COLUMN IF NOT EXISTS started_at BIGINT,
    ADD COLUMN IF NOT EXISTS started_by TEXT,
    ADD COLUMN IF NOT EXISTS started_lease_expires_at BIGINT,
    ADD COLUMN IF NOT EXISTS succeeded_sequence INTEGER,
    ADD COLUMN IF NOT EXISTS succeeded_at BIGINT;

-- The claim of 015 (in claim order, up to the horizon), recording the start on the
-- row instead of appending run.started (p_lease_expires_iso is no longer read; the
-- signature stays).
CREATE OR REPLACE FUNCTION {schema}.runlane_claim_due_runs(
    p_environment TEXT, p_queues TEXT[], p_limit BIGINT, p_now BIGINT, p_key_lock_prefix TEXT,
    p_worker_id TEXT, p_lease_token TEXT, p_lease_expires_at BIGINT, p_lease_expires_iso TEXT,
    p_horizon BIGINT
) RETURNS SETOF {schema}.runlane_runs
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan
-- A generic plan takes the environment for a rare one (the common ones are in the
-- column's statistics), so it may expect a queue to hold a run or two and choose a
-- bitmap scan and a sort: every due run read, for a claim of a few. Without bitmap
-- scans the claimable index is read in order, up to the limit.
SET enable_bitmapscan = off
AS $claim$
DECLARE
    keys_held TEXT;
BEGIN
    keys_held := {schema}.runlane_lock_claimable_keys(
        p_environment, p_queues, p_limit, p_now, p_key_lock_prefix
    );
    -- Per queue, lock the first due runs in claim order without a key no other
    -- claimer holds, and
    -- the first claimable delivery of each key whose lock was just taken, found in
    -- this statement's fresh snapshot, which sees every decision on the key committed
    -- before its lock; then take them in turns across queues.
    RETURN QUERY
    WITH held AS (
        SELECT string_to_array(nullif(keys_held, ''), ',')::bigint[] AS lock_ids
    ),
    keyed AS (
        SELECT locked.id, locked.claim_at, locked.queue
        FROM unnest(ARRAY(
            SELECT ranked.id
            FROM (
                SELECT k.id, k.run_at, k.task_id, k.partition_key,
                       row_number() OVER (
                           PARTITION BY k.task_id, k.partition_key ORDER BY k.run_at, k.id
                       ) AS rank_in_key
                FROM {schema}.runlane_runs k
                -- No key lock held (task runs only): nothing to look at.
                WHERE cardinality((SELECT lock_ids FROM held)) > 0
                  AND k.environment = p_environment
                  AND k.partition_key IS NOT NULL
                  -- The claimable ones of runlane_runs_keyed's set, named so that the
                  -- runlane_runs_claimable index (every due run) cannot serve the scan.
                  AND k.status IN ('queued', 'scheduled', 'retrying', 'released', 'running',
                                   'cancellation_requested', 'dead_lettered')
                  AND k.status NOT IN ('running', 'cancellation_requested', 'dead_lettered')
                  AND k.run_at <= p_now
                  AND k.queue = ANY(p_queues::text[])
                  AND hashtextextended(
                          p_key_lock_prefix || length(k.task_id) || ':' || k.task_id
                          || ':' || k.partition_key, 0
                      ) = ANY((SELECT lock_ids FROM held)::bigint[])
                  -- ORDERED: the key's head (no unfinished delivery before it).
                  AND (k.subscription_mode <> 'ordered' OR NOT EXISTS (
                      SELECT 1 FROM {schema}.runlane_runs o
                      WHERE o.environment = k.environment AND o.task_id = k.task_id
                        AND o.partition_key = k.partition_key
                        AND o.status IN ('queued', 'scheduled', 'retrying', 'released', 'running',
                                         'cancellation_requested', 'dead_lettered')
                        AND o.message_sequence < k.message_sequence
                  ))
            ) AS ranked
            WHERE ranked.rank_in_key = 1
              -- No delivery of the key holds an unexpired lease.
              AND NOT EXISTS (
                  SELECT 1 FROM {schema}.runlane_runs o
                  WHERE o.environment = p_environment AND o.task_id = ranked.task_id
                    AND o.partition_key = ranked.partition_key
                    AND o.status IN ('running', 'cancellation_requested')
                    AND o.lease_expires_at > p_now
              )
            ORDER BY ranked.run_at, ranked.id
            LIMIT p_limit
        )) AS chosen(id)
        -- Each by primary key: the row is locked as it is now, then checked.
        CROSS JOIN LATERAL (
            SELECT r.id, r.run_at, r.run_at - r.priority_offset AS claim_at, r.queue, r.status
            FROM {schema}.runlane_runs r
            WHERE r.environment = p_environment AND r.id = chosen.id
            -- The limit keeps the checks below out of this scan, or the planner
            -- may walk the claimable index to apply them.
            LIMIT 1
            FOR UPDATE SKIP LOCKED
        ) AS locked
        WHERE locked.status IN ('queued', 'scheduled', 'retrying', 'released')
          AND locked.run_at <= p_now
    ),
    candidates AS (
        SELECT due.id
        FROM (
            SELECT c.id, c.claim_at,
                   row_number() OVER (PARTITION BY c.queue ORDER BY c.claim_at, c.id) AS turn
            FROM (
                SELECT picked.id, picked.claim_at, q.name AS queue
                FROM unnest(p_queues::text[]) AS q(name)
                CROSS JOIN LATERAL (
                    -- runlane_runs_claim_order read in order from its start up to the
                    -- horizon (no due run's claim time is later), stopping at the limit.
                    SELECT r.id, r.run_at - r.priority_offset AS claim_at
                    FROM {schema}.runlane_runs r
                    WHERE r.environment = p_environment
                      AND r.queue = q.name
                      AND r.status IN ('queued', 'scheduled', 'retrying', 'released')
                      AND r.run_at - r.priority_offset <= p_horizon
                      AND r.run_at <= p_now
                      AND r.partition_key IS NULL
                    ORDER BY r.run_at - r.priority_offset, r.id
                    LIMIT p_limit
                    FOR UPDATE SKIP LOCKED
                ) AS picked
                UNION ALL
                SELECT keyed.id, keyed.claim_at, keyed.queue FROM keyed
            ) AS c
        ) AS due
        ORDER BY due.turn, due.claim_at, due.id
        LIMIT p_limit
    ),
    claimed AS (
        UPDATE {schema}.runlane_runs r
        SET status = 'running',
            attempt = r.attempt + 1,
            event_sequence = r.event_sequence + 1,
            lease_owner = p_worker_id,
            lease_token = p_lease_token,
            lease_expires_at = p_lease_expires_at,
            reserved_until = NULL,
            updated_at = p_now,
            started_sequence = r.event_sequence + 1,
            started_at = p_now,
            started_by = p_worker_id,
            started_lease_expires_at = p_lease_expires_at
        WHERE r.environment = p_environment AND r.id = ANY(ARRAY(SELECT id FROM candidates))
        RETURNING r.*
    )
    SELECT * FROM claimed;
END
$claim$;
