-- Claims of unbounded queues as one statement: the two statements a claim sent in
-- one transaction (the key locks, then the claim in a fresh snapshot) move into
-- functions. A claim with nothing to settle then goes out alone, in autocommit: no
-- BEGIN, SET LOCAL or COMMIT beside it, one statement for the client to send and
-- read back, which is most of an idle worker's time from a notification to a start.
-- Each statement of a VOLATILE PL/pgSQL function takes a fresh snapshot, so the
-- claim still sees every decision on a key committed before its lock was taken
-- (contract 5.14); the advisory locks are the transaction's, held until it ends.
-- PL/pgSQL keeps the functions' plans for the session, and plan_cache_mode makes
-- them generic from the first call: planning the claim afresh each time costs more
-- than running it. The statements are those of claims.sql before this migration,
-- parameters renamed p_*; claims.sql now calls the functions.

-- Polling claims: try to take the key locks of up to limit keys that have a due
-- delivery in the queues which looked claimable a moment ago (this snapshot), the
-- keys with the oldest such deliveries first. Keys another transaction is deciding
-- on are skipped, never waited for (5.7.3), so no claim deadlocks on a key. The lock
-- ids taken are kept in runlane.claim_keys until the transaction ends; with no
-- keyed delivery due (task runs only) the scan finds nothing in runlane_runs_keyed.
CREATE OR REPLACE FUNCTION {schema}.runlane_lock_claimable_keys(
    p_environment TEXT, p_queues TEXT[], p_limit BIGINT, p_now BIGINT, p_key_lock_prefix TEXT
) RETURNS TEXT
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan
AS $lock$
DECLARE
    keys_taken TEXT;
BEGIN
    SELECT set_config(
        'runlane.claim_keys', coalesce(string_agg(taken.lock_id::text, ',' ORDER BY taken.lock_id), ''),
        true
    ) INTO keys_taken
    FROM (
        SELECT chosen.lock_id
        FROM (
            SELECT firsts.lock_id
            FROM (
                -- Each key's first claimable delivery, in claim order.
                SELECT DISTINCT ON (k.task_id, k.partition_key)
                       hashtextextended(
                           p_key_lock_prefix || length(k.task_id) || ':' || k.task_id
                           || ':' || k.partition_key, 0
                       ) AS lock_id,
                       k.run_at, k.id, k.task_id, k.partition_key
                FROM (
                    -- Every unfinished delivery of every key, with the sequence of its
                    -- key's head: one ordered pass over runlane_runs_keyed.
                    SELECT u.id, u.task_id, u.partition_key, u.queue, u.status, u.run_at,
                           u.subscription_mode, u.message_sequence,
                           min(u.message_sequence) OVER (
                               PARTITION BY u.task_id, u.partition_key
                           ) AS head_sequence
                    FROM {schema}.runlane_runs u
                    WHERE u.environment = p_environment
                      AND u.partition_key IS NOT NULL
                      AND u.status IN ('queued', 'scheduled', 'retrying', 'released', 'running',
                                       'cancellation_requested', 'dead_lettered')
                ) AS k
                WHERE k.status IN ('queued', 'scheduled', 'retrying', 'released')
                  AND k.run_at <= p_now
                  AND k.queue = ANY(p_queues::text[])
                  -- ORDERED: the key's head (no unfinished delivery before it).
                  AND (k.subscription_mode <> 'ordered' OR k.message_sequence = k.head_sequence)
                ORDER BY k.task_id, k.partition_key, k.run_at, k.id
            ) AS firsts
            -- No delivery of the key holds an unexpired lease.
            WHERE NOT EXISTS (
                SELECT 1 FROM {schema}.runlane_runs o
                WHERE o.environment = p_environment AND o.task_id = firsts.task_id
                  AND o.partition_key = firsts.partition_key
                  AND o.status IN ('running', 'cancellation_requested')
                  AND o.lease_expires_at > p_now
            )
            ORDER BY firsts.run_at, firsts.id
            LIMIT p_limit
        ) AS chosen
        ORDER BY chosen.lock_id
    ) AS taken
    WHERE pg_try_advisory_xact_lock(taken.lock_id);
    RETURN keys_taken;
END
$lock$;

-- Per queue, lock the oldest due runs without a key no other claimer holds (SKIP
-- LOCKED), and the first claimable delivery of each key whose lock this transaction
-- holds; then take them in turns across queues, so a worker on many queues serves
-- them all. Without key locks held (task runs only) the keyed part is not run.
CREATE OR REPLACE FUNCTION {schema}.runlane_claim_due_runs(
    p_environment TEXT, p_queues TEXT[], p_limit BIGINT, p_now BIGINT, p_key_lock_prefix TEXT,
    p_worker_id TEXT, p_lease_token TEXT, p_lease_expires_at BIGINT, p_lease_expires_iso TEXT
) RETURNS SETOF {schema}.runlane_runs
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan
AS $claim$
BEGIN
    PERFORM {schema}.runlane_lock_claimable_keys(
        p_environment, p_queues, p_limit, p_now, p_key_lock_prefix
    );
    RETURN QUERY
    WITH held AS (
        SELECT string_to_array(
            nullif(current_setting('runlane.claim_keys', true), ''), ','
        )::bigint[] AS lock_ids
    ),
    keyed AS (
        SELECT r.id, r.run_at, r.queue
        FROM {schema}.runlane_runs r
        WHERE r.environment = p_environment
          AND r.id = ANY(ARRAY(
              SELECT ranked.id
              FROM (
                  SELECT k.id, k.run_at, k.task_id, k.partition_key,
                         row_number() OVER (
                             PARTITION BY k.task_id, k.partition_key ORDER BY k.run_at, k.id
                         ) AS rank_in_key
                  FROM {schema}.runlane_runs k
                  WHERE cardinality((SELECT lock_ids FROM held)) > 0
                    AND k.environment = p_environment
                    AND k.partition_key IS NOT NULL
                    AND k.status IN ('queued', 'scheduled', 'retrying', 'released')
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
          ))
          AND r.status IN ('queued', 'scheduled', 'retrying', 'released')
          AND r.run_at <= p_now
        FOR UPDATE OF r SKIP LOCKED
    ),
    candidates AS (
        SELECT due.id
        FROM (
            SELECT c.id, c.run_at,
                   row_number() OVER (PARTITION BY c.queue ORDER BY c.run_at, c.id) AS turn
            FROM (
                SELECT picked.id, picked.run_at, q.name AS queue
                FROM unnest(p_queues::text[]) AS q(name)
                CROSS JOIN LATERAL (
                    SELECT r.id, r.run_at
                    FROM {schema}.runlane_runs r
                    WHERE r.environment = p_environment
                      AND r.queue = q.name
                      AND r.status IN ('queued', 'scheduled', 'retrying', 'released')
                      AND r.run_at <= p_now
                      AND r.partition_key IS NULL
                    ORDER BY r.run_at, r.id
                    LIMIT p_limit
                    FOR UPDATE SKIP LOCKED
                ) AS picked
                UNION ALL
                SELECT keyed.id, keyed.run_at, keyed.queue FROM keyed
            ) AS c
        ) AS due
        ORDER BY due.turn, due.run_at, due.id
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
