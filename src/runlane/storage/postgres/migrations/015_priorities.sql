-- Priorities (flow control, 7.2). A run keeps its priority (-10..10) and the offset
-- it buys (microseconds, priority x the queue's priority window / 10, fixed when the
-- run is created), so retries and releases, which move run_at, keep its place. A
-- run's place in its queue's claim order is run_at - priority_offset.
ALTER TABLE {schema}.runlane_runs
    ADD COLUMN IF NOT EXISTS priority INTEGER NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS priority_offset BIGINT NOT NULL DEFAULT 0;

-- The claims read each queue's runnable runs in claim order: an ordered index scan
-- that stops at the claim's limit, whatever priorities the queue mixes. (The
-- run_at-ordered runlane_runs_claimable stays for the statements that look for due
-- runs by due time: delivery requests, capacity locks, counts.)
CREATE INDEX IF NOT EXISTS runlane_runs_claim_order
    ON {schema}.runlane_runs (environment, queue, (run_at - priority_offset), id)
    WHERE status IN ('queued', 'scheduled', 'retrying', 'released');

-- The unbounded claim of migration 010 in claim order. It takes a horizon (now plus
-- the widest priority window of the queues: no due run's claim time is later), which
-- ends each queue's ordered index scan; run_at <= now keeps runs that are not due yet
-- out, whatever their priority. A new argument: the old function goes.
DROP FUNCTION IF EXISTS {schema}.runlane_claim_due_runs(
    TEXT, TEXT[], BIGINT, BIGINT, TEXT, TEXT, TEXT, BIGINT, TEXT
);

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
            updated_at = p_now
        WHERE r.environment = p_environment AND r.id = ANY(ARRAY(SELECT id FROM candidates))
        RETURNING r.*
    ),
    started AS (
        INSERT INTO {schema}.runlane_run_events (
            environment, run_id, sequence, type, occurred_at, data
        )
        SELECT environment, id, event_sequence, 'run.started', p_now,
               jsonb_build_object(
                   'attempt', attempt, 'worker_id', lease_owner,
                   'lease_expires_at', p_lease_expires_iso::text
               )
        FROM claimed
    )
    SELECT * FROM claimed;
END
$claim$;
