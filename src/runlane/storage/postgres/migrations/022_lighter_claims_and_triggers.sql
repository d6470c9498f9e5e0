-- Two costs every statement that writes a run pays, whatever it writes:
--
-- The unbounded queues' claim (migration 017's function) held the keyed deliveries'
-- part of the statement (key locks, ranks per key, the ORDERED rule) in every call:
-- PostgreSQL builds the executor state of a whole plan for each execution, the
-- parts a one-time filter then skips included, and the key locks' function ran its
-- own statement each time. A claim now first looks whether the environment has an
-- unfinished keyed delivery at all (one probe of runlane_runs_keyed); without one
-- (task runs only, the usual case) it takes neither key locks nor that part, and
-- runs the plain statement: the same runs in the same order, since the full
-- statement claims no keyed delivery without its key's lock either. A keyed
-- delivery written after the probe is left to the next claim, as one whose key
-- another claimer is deciding on.
--
-- PostgreSQL also reads the WHEN clause of every AFTER trigger on a column an
-- UPDATE writes, from its stored text, for each statement. A list of statuses there
-- is its most expensive part to read. The dependency and rate-key triggers now test
-- only their flag and key (the functions test the status themselves, as the rate-key
-- one does since 019): rows with dependents or a rate key are few, and only they
-- call the functions.
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
-- scans the claim-order index is read in order, up to the limit.
SET enable_bitmapscan = off
AS $claim$
DECLARE
    keys_held TEXT := '';
BEGIN
    -- runlane_runs_keyed's own predicate, so that the probe reads that index.
    IF EXISTS (
        SELECT 1 FROM {schema}.runlane_runs k
        WHERE k.environment = p_environment
          AND k.partition_key IS NOT NULL
          AND k.status IN ('queued', 'scheduled', 'retrying', 'released', 'running',
                           'cancellation_requested', 'dead_lettered')
    ) THEN
        keys_held := {schema}.runlane_lock_claimable_keys(
            p_environment, p_queues, p_limit, p_now, p_key_lock_prefix
        );
    END IF;
    IF coalesce(keys_held, '') = '' THEN
        -- Per queue, lock the first due runs in claim order (no keyed delivery),
        -- then take them in turns across queues.
        RETURN QUERY
        WITH candidates AS (
            SELECT due.id
            FROM (
                SELECT picked.id, picked.claim_at,
                       row_number() OVER (
                           PARTITION BY q.name ORDER BY picked.claim_at, picked.id
                       ) AS turn
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
    ELSE
        -- Per queue, lock the first due runs in claim order without a key no other
        -- claimer holds, and the first claimable delivery of each key whose lock was
        -- just taken, found in this statement's fresh snapshot, which sees every
        -- decision on the key committed before its lock; then take them in turns
        -- across queues.
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
    END IF;
END
$claim$;

CREATE OR REPLACE FUNCTION {schema}.runlane_dependency_settled() RETURNS trigger
LANGUAGE plpgsql AS $body$
BEGIN
    IF NEW.status NOT IN ('succeeded', 'failed', 'cancelled', 'discarded', 'dead_lettered') THEN
        RETURN NULL;
    END IF;
    UPDATE {schema}.runlane_waiting_runs w
    SET pending = w.pending - 1,
        failed_dependency = CASE
            WHEN w.failed_dependency IS NULL AND NEW.status <> 'succeeded' THEN NEW.id
            ELSE w.failed_dependency END,
        updated_at = NEW.updated_at
    FROM {schema}.runlane_run_dependencies e
    WHERE e.dependency_id = NEW.id AND e.environment = NEW.environment AND NOT e.resolved
      AND w.run_id = e.dependent_id AND w.environment = NEW.environment
      AND NOT w.settled;
    UPDATE {schema}.runlane_run_dependencies
    SET resolved = true
    WHERE dependency_id = NEW.id AND environment = NEW.environment AND NOT resolved;
    RETURN NULL;
END
$body$;

DROP TRIGGER IF EXISTS runlane_dependency_settled ON {schema}.runlane_runs;
CREATE TRIGGER runlane_dependency_settled
AFTER UPDATE OF status ON {schema}.runlane_runs
FOR EACH ROW
WHEN (NEW.has_dependents)
EXECUTE FUNCTION {schema}.runlane_dependency_settled();

-- The function tests the status itself since 019.
DROP TRIGGER IF EXISTS runlane_rate_key_run_waiting ON {schema}.runlane_runs;
CREATE TRIGGER runlane_rate_key_run_waiting
AFTER UPDATE OF status, run_at ON {schema}.runlane_runs
FOR EACH ROW
WHEN (NEW.rate_key IS NOT NULL)
EXECUTE FUNCTION {schema}.runlane_rate_key_waiting();
