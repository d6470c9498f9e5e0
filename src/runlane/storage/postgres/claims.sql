-- Claims of the PostgreSQL driver, each a whole statement: choose the runs
-- (candidates) and lease them, in one statement; the row implies run.started (its
-- started_* columns, migration 017). All claims lease alike; only the choice of
-- candidates differs.
-- Candidates are locked rows checked as they are now; they are found by primary key
-- (= ANY), so the plan never depends on how stale the table's statistics are.
--
-- Key rules (contract 5.7), for deliveries with a partition key (task runs and NONE
-- deliveries have none and skip every keyed part): EXCLUSIVE, no delivery of the
-- same (task_id, partition_key) holds an unexpired lease; ORDERED, also no delivery
-- of it with a lower sequence is unfinished; one claim takes at most one delivery
-- per key. A statement's snapshot cannot see another claimer's uncommitted lease
-- (5.14), so keyed deliveries are claimed only under their key's advisory lock
-- (the name built in storage/sql/claiming.py, publishes take the same), taken by an
-- earlier statement of the same transaction: the claim's snapshot then sees every
-- decision on the key committed before. lock_claimable_keys records the keys it
-- took in the transaction-local setting runlane.claim_keys, which the claims read.
-- The unbounded queues' claim and the key locks are PL/pgSQL functions (migration
-- 009, the claim replaced by 010), whose statements each take a fresh snapshot: the
-- claim calls the locks first, and runs its keyed part only when it took some.

-- name: lock_claimable_keys
-- Polling claims: try to take the key locks of up to limit keys that have a due
-- delivery in the queues, oldest first, skipping keys another transaction is
-- deciding on (5.7.3); the lock ids taken go to runlane.claim_keys until the
-- transaction ends. The statement is a function since migration 009 (its text is
-- there), so that runlane_claim_due_runs takes the same locks.
SELECT {schema}.runlane_lock_claimable_keys(
    %(environment)s, %(queues)b::text[], %(limit)s::bigint, %(now)s::bigint,
    %(key_lock_prefix)s
) AS claim_keys;

-- name: lock_run_key
-- claim_run: wait for the key lock of the run's (subscription, key), if it has a key;
-- nothing else is held yet, so the wait cannot close a cycle.
SELECT count(pg_advisory_xact_lock(
    hashtextextended(
        %(key_lock_prefix)s || length(r.task_id) || ':' || r.task_id || ':' || r.partition_key, 0
    )
)) AS locked
FROM {schema}.runlane_runs r
WHERE r.environment = %(environment)s AND r.id = %(id)s AND r.partition_key IS NOT NULL;

-- name: claim_due_runs
-- Per queue, lock the first due runs in claim order (due time less the priority
-- offset) without a key no other claimer holds (SKIP LOCKED), reading the queue's
-- runlane_runs_claim_order up to the horizon (now plus the widest priority window),
-- and the first claimable delivery of each key whose lock it takes first
-- (lock_claimable_keys, in its own snapshot; only when the environment has an
-- unfinished keyed delivery at all, migration 022); then take them in turns across
-- queues, so a worker on many queues serves them all. A function since migration 009
-- (its text is in 022, which replaced it): one statement, which an idle worker sends
-- alone in autocommit. Its p_lease_expires_iso is no longer read (017): NULL.
SELECT * FROM {schema}.runlane_claim_due_runs(
    %(environment)s, %(queues)b::text[], %(limit)s::bigint, %(now)s::bigint,
    %(key_lock_prefix)s, %(worker_id)s, %(lease_token)s, %(lease_expires_at)s::bigint,
    NULL::text, %(horizon)s::bigint
);

-- name: claim_bounded_runs
-- Bounded queues, whose capacity locks the caller holds: per (queue, concurrency
-- key) partition, at most the limit minus the runs holding an unexpired lease, first
-- in claim order (due time less the priority offset); of a partition key (whose key
-- lock the caller holds), at most its first claimable delivery. A queue that never
-- held a run with a concurrency key (migration 023) is one partition: only its first
-- due runs, as many as its limit, are read.
WITH candidates AS (
    WITH limits AS (
        -- scan: how many due runs to read (all of a partitioned queue: NULL).
        SELECT q.name, q.lim, CASE WHEN EXISTS (
                   SELECT FROM {schema}.runlane_partitioned_queues p
                   WHERE p.environment = %(environment)s AND p.queue = q.name
               ) THEN NULL ELSE q.lim END AS scan
        FROM unnest(%(queues)b::text[], %(limits)b::int[]) AS q(name, lim)
    ),
    held AS (
        SELECT string_to_array(
        nullif(current_setting('runlane.claim_keys', true), ''), ','
    )::bigint[] AS lock_ids
    ),
    occupied AS (
        SELECT r.queue, coalesce(r.concurrency_key, '') AS part, count(*) AS n
        FROM {schema}.runlane_runs r
        JOIN limits ON limits.name = r.queue
        WHERE r.environment = %(environment)s
          AND r.status IN ('running', 'cancellation_requested')
          AND r.lease_expires_at > %(now)s
        GROUP BY 1, 2
    ),
    eligible AS (
        -- runlane_runs_claim_order up to the horizon (now plus the widest priority
        -- window of the queues: no due run's claim time is later), in claim order: of
        -- a queue of one partition only its first runs, as many as its limit (no
        -- later one can be taken), of a partitioned queue every due run.
        SELECT first.*, limits.lim
        FROM limits CROSS JOIN LATERAL (
            SELECT r.id, r.queue, r.run_at - r.priority_offset AS claim_at,
                   coalesce(r.concurrency_key, '') AS part
            FROM {schema}.runlane_runs r
            WHERE r.environment = %(environment)s AND r.queue = limits.name
              AND r.status IN ('queued', 'scheduled', 'retrying', 'released')
              AND r.run_at - r.priority_offset <= %(horizon)s
              AND r.run_at <= %(now)s
              AND r.partition_key IS NULL
            ORDER BY r.run_at - r.priority_offset, r.id
            LIMIT limits.scan
        ) AS first
        UNION ALL
        SELECT f.id, f.queue, f.claim_at, f.part,
               f.lim
        FROM (
            SELECT k.id, k.queue, k.run_at - k.priority_offset AS claim_at,
                   coalesce(k.concurrency_key, '') AS part, limits.lim,
                   k.task_id, k.partition_key,
                   row_number() OVER (
                       PARTITION BY k.task_id, k.partition_key ORDER BY k.run_at, k.id
                   ) AS rank_in_key
            FROM {schema}.runlane_runs k
            JOIN limits ON limits.name = k.queue
            WHERE cardinality((SELECT lock_ids FROM held)) > 0
              AND k.environment = %(environment)s
              AND k.partition_key IS NOT NULL
              AND k.status IN ('queued', 'scheduled', 'retrying', 'released')
              AND k.run_at <= %(now)s
              AND hashtextextended(
                      %(key_lock_prefix)s || length(k.task_id) || ':' || k.task_id
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
        ) AS f
        WHERE f.rank_in_key = 1
          -- No delivery of the key holds an unexpired lease.
          AND NOT EXISTS (
              SELECT 1 FROM {schema}.runlane_runs o
              WHERE o.environment = %(environment)s AND o.task_id = f.task_id
                AND o.partition_key = f.partition_key
                AND o.status IN ('running', 'cancellation_requested')
                AND o.lease_expires_at > %(now)s
          )
    ),
    ranked AS (
        SELECT *, row_number() OVER (PARTITION BY queue, part ORDER BY claim_at, id) AS rn
        FROM eligible
    )
    SELECT r.id
    FROM {schema}.runlane_runs r
    WHERE r.environment = %(environment)s
      AND r.id = ANY(ARRAY(
          SELECT id
          FROM ranked LEFT JOIN occupied USING (queue, part)
          WHERE rn <= lim - coalesce(n, 0)
          ORDER BY claim_at, id
          LIMIT %(limit)s
      ))
      -- IS TRUE: a test no partial index's predicate follows from, so the candidates
      -- are read by primary key even when stale statistics make claimable runs look
      -- rare (runlane_runs_claim_order would then be read whole).
      AND (r.status IN ('queued', 'scheduled', 'retrying', 'released')) IS TRUE
      AND r.run_at <= %(now)s
    FOR UPDATE OF r
),
claimed AS (
    UPDATE {schema}.runlane_runs r
    SET status = 'running',
        attempt = r.attempt + 1,
        event_sequence = r.event_sequence + 1,
        lease_owner = %(worker_id)s,
        lease_token = %(lease_token)s,
        lease_expires_at = %(lease_expires_at)s,
        reserved_until = NULL,
        updated_at = %(now)s,
        -- run.started is implied by these (migration 017).
        started_sequence = r.event_sequence + 1,
        started_at = %(now)s,
        started_by = %(worker_id)s,
        started_lease_expires_at = %(lease_expires_at)s
    WHERE r.environment = %(environment)s AND r.id = ANY(ARRAY(SELECT id FROM candidates))
    RETURNING r.*
)
SELECT * FROM claimed;

-- name: claim_run
-- One run, if it is claimable and due and its key (if any, whose lock the caller
-- took with lock_run_key) lets it run.
WITH candidates AS (
    SELECT k.id
    FROM {schema}.runlane_runs k
    WHERE k.environment = %(environment)s AND k.id = %(id)s
      AND k.status IN ('queued', 'scheduled', 'retrying', 'released')
      AND k.run_at <= %(now)s
      AND (k.partition_key IS NULL OR NOT EXISTS (
          SELECT 1 FROM {schema}.runlane_runs o
          WHERE o.environment = k.environment AND o.task_id = k.task_id
            AND o.partition_key = k.partition_key
            AND o.status IN ('queued', 'scheduled', 'retrying', 'released', 'running',
                             'cancellation_requested', 'dead_lettered')
            AND ((o.status IN ('running', 'cancellation_requested')
                  AND o.lease_expires_at > %(now)s)
                 OR (k.subscription_mode = 'ordered'
                     AND o.message_sequence < k.message_sequence))
      ))
    FOR UPDATE OF k
),
claimed AS (
    UPDATE {schema}.runlane_runs r
    SET status = 'running',
        attempt = r.attempt + 1,
        event_sequence = r.event_sequence + 1,
        lease_owner = %(worker_id)s,
        lease_token = %(lease_token)s,
        lease_expires_at = %(lease_expires_at)s,
        reserved_until = NULL,
        updated_at = %(now)s,
        -- run.started is implied by these (migration 017).
        started_sequence = r.event_sequence + 1,
        started_at = %(now)s,
        started_by = %(worker_id)s,
        started_lease_expires_at = %(lease_expires_at)s
    WHERE r.environment = %(environment)s AND r.id = ANY(ARRAY(SELECT id FROM candidates))
    RETURNING r.*
)
SELECT * FROM claimed;

-- name: key_unavailable
-- execute_delivery's ignore path, for a delivery with a key that is due and waiting
-- yet was not claimed: its delivery request is cleared, so tick requests it again
-- once it is claimable; blocked says whether its key is what keeps it waiting (the
-- rule of claim_run).
WITH target AS (
    SELECT k.id, EXISTS (
               SELECT 1 FROM {schema}.runlane_runs o
               WHERE o.environment = k.environment AND o.task_id = k.task_id
                 AND o.partition_key = k.partition_key
                 AND o.status IN ('queued', 'scheduled', 'retrying', 'released', 'running',
                                  'cancellation_requested', 'dead_lettered')
                 AND ((o.status IN ('running', 'cancellation_requested')
                       AND o.lease_expires_at > %(now)s)
                      OR (k.subscription_mode = 'ordered'
                          AND o.message_sequence < k.message_sequence))
           ) AS blocked
    FROM {schema}.runlane_runs k
    WHERE k.environment = %(environment)s AND k.id = %(id)s
      AND k.partition_key IS NOT NULL
      AND k.status IN ('queued', 'scheduled', 'retrying', 'released')
      AND k.run_at <= %(now)s
    FOR UPDATE OF k
),
cleared AS (
    UPDATE {schema}.runlane_runs r
    SET delivery_requested_at = NULL, reserved_until = NULL
    FROM target
    WHERE r.environment = %(environment)s AND r.id = target.id
    RETURNING r.id
)
SELECT target.id, target.blocked FROM target JOIN cleared ON cleared.id = target.id;

-- name: lock_capacity
-- Serialise capacity decisions on bounded queues until the transaction ends, in
-- the (sorted) order given. Without waiting, queues another process is deciding on
-- (or without due runs) are skipped. The queues locked come back. A due run is
-- looked for in runlane_runs_claim_order up to the horizon (now plus the widest
-- priority window of the queues), which ends the read however many runs wait later.
-- The first in claim order (a subquery, not EXISTS, which PostgreSQL would strip of
-- its order): a generic plan may otherwise scan the table for any one, which reads a
-- long way when the due runs lie behind many others.
SELECT q.name
FROM unnest(%(queues)b::text[]) AS q(name)
WHERE CASE
    WHEN NOT %(wait)s THEN
        (
            SELECT r.id FROM {schema}.runlane_runs r
            WHERE r.environment = %(environment)s AND r.queue = q.name
              AND r.status IN ('queued', 'scheduled', 'retrying', 'released')
              AND r.run_at - r.priority_offset <= %(horizon)s
              AND r.run_at <= %(now)s
            ORDER BY r.run_at - r.priority_offset, r.id
            LIMIT 1
        ) IS NOT NULL
        AND pg_try_advisory_xact_lock(hashtextextended(%(lock_prefix)s || q.name, 0))
    ELSE pg_advisory_xact_lock(hashtextextended(%(lock_prefix)s || q.name, 0)) IS NOT NULL
END;

-- name: occupied_capacity
SELECT count(*) AS n FROM {schema}.runlane_runs
WHERE environment = %(environment)s AND queue = %(queue)s
  AND coalesce(concurrency_key, '') = coalesce(%(concurrency_key)s::text, '')
  AND status IN ('running', 'cancellation_requested')
  AND lease_expires_at > %(now)s;
