-- Claims of the PostgreSQL driver, each a whole statement: choose the runs
-- (candidates), lease them and append run.started, in one statement. All three
-- lease alike (claimed, started); only the choice of candidates differs.
-- Candidates are locked rows checked as they are now; they are found by primary key
-- (= ANY), so the plan never depends on how stale the table's statistics are.

-- name: claim_due_runs
-- Per queue, lock the oldest due runs no other claimer holds (SKIP LOCKED), then
-- take them in turns across queues, so a worker on many queues serves them all.
WITH candidates AS (
    SELECT due.id
    FROM (
        SELECT picked.id, picked.run_at,
               row_number() OVER (PARTITION BY q.name ORDER BY picked.run_at, picked.id) AS turn
        FROM unnest(%(queues)b::text[]) AS q(name)
        CROSS JOIN LATERAL (
            SELECT r.id, r.run_at
            FROM {schema}.runlane_runs r
            WHERE r.environment = %(environment)s
              AND r.queue = q.name
              AND r.status IN ('queued', 'scheduled', 'retrying', 'released')
              AND r.run_at <= %(now)s
            ORDER BY r.run_at, r.id
            LIMIT %(limit)s
            FOR UPDATE SKIP LOCKED
        ) AS picked
    ) AS due
    ORDER BY due.turn, due.run_at, due.id
    LIMIT %(limit)s
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
        updated_at = %(now)s
    WHERE r.environment = %(environment)s AND r.id = ANY(ARRAY(SELECT id FROM candidates))
    RETURNING r.*
),
started AS (
    INSERT INTO {schema}.runlane_run_events (
        environment, run_id, sequence, type, occurred_at, data
    )
    SELECT environment, id, event_sequence, 'run.started', %(now)s,
           jsonb_build_object(
               'attempt', attempt, 'worker_id', lease_owner,
               'lease_expires_at', %(lease_expires_iso)s::text
           )
    FROM claimed
)
SELECT * FROM claimed;

-- name: claim_bounded_runs
-- Bounded queues, whose capacity locks the caller holds: per (queue, concurrency
-- key) partition, at most the limit minus the runs holding an unexpired lease.
WITH candidates AS (
    WITH limits AS (
        SELECT * FROM unnest(%(queues)b::text[], %(limits)b::int[]) AS q(name, lim)
    ),
    occupied AS (
        SELECT r.queue, coalesce(r.concurrency_key, '') AS part, count(*) AS n
        FROM {schema}.runlane_runs r
        JOIN limits ON limits.name = r.queue
        WHERE r.environment = %(environment)s
          AND r.status IN ('running', 'cancellation_requested')
          AND r.lease_expires_at > %(now)s
        GROUP BY r.queue, coalesce(r.concurrency_key, '')
    ),
    ranked AS (
        SELECT r.id, r.queue, r.run_at, coalesce(r.concurrency_key, '') AS part, limits.lim,
               row_number() OVER (
                   PARTITION BY r.queue, coalesce(r.concurrency_key, '') ORDER BY r.run_at, r.id
               ) AS rn
        FROM {schema}.runlane_runs r
        JOIN limits ON limits.name = r.queue
        WHERE r.environment = %(environment)s
          AND r.status IN ('queued', 'scheduled', 'retrying', 'released')
          AND r.run_at <= %(now)s
    )
    SELECT r.id
    FROM {schema}.runlane_runs r
    WHERE r.environment = %(environment)s
      AND r.id = ANY(ARRAY(
          SELECT ranked.id
          FROM ranked
          LEFT JOIN occupied ON occupied.queue = ranked.queue AND occupied.part = ranked.part
          WHERE ranked.rn <= ranked.lim - coalesce(occupied.n, 0)
          ORDER BY ranked.run_at, ranked.id
          LIMIT %(limit)s
      ))
      AND r.status IN ('queued', 'scheduled', 'retrying', 'released')
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
        updated_at = %(now)s
    WHERE r.environment = %(environment)s AND r.id = ANY(ARRAY(SELECT id FROM candidates))
    RETURNING r.*
),
started AS (
    INSERT INTO {schema}.runlane_run_events (
        environment, run_id, sequence, type, occurred_at, data
    )
    SELECT environment, id, event_sequence, 'run.started', %(now)s,
           jsonb_build_object(
               'attempt', attempt, 'worker_id', lease_owner,
               'lease_expires_at', %(lease_expires_iso)s::text
           )
    FROM claimed
)
SELECT * FROM claimed;

-- name: claim_run
WITH candidates AS (
    SELECT r.id
    FROM {schema}.runlane_runs r
    WHERE r.environment = %(environment)s AND r.id = %(id)s
      AND r.status IN ('queued', 'scheduled', 'retrying', 'released')
      AND r.run_at <= %(now)s
    FOR UPDATE
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
        updated_at = %(now)s
    WHERE r.environment = %(environment)s AND r.id = ANY(ARRAY(SELECT id FROM candidates))
    RETURNING r.*
),
started AS (
    INSERT INTO {schema}.runlane_run_events (
        environment, run_id, sequence, type, occurred_at, data
    )
    SELECT environment, id, event_sequence, 'run.started', %(now)s,
           jsonb_build_object(
               'attempt', attempt, 'worker_id', lease_owner,
               'lease_expires_at', %(lease_expires_iso)s::text
           )
    FROM claimed
)
SELECT * FROM claimed;

-- name: lock_capacity
-- Serialise capacity decisions on bounded queues until the transaction ends, in
-- the (sorted) order given. Without waiting, queues another process is deciding on
-- (or without due runs) are skipped. The queues locked come back.
SELECT q.name
FROM unnest(%(queues)b::text[]) AS q(name)
WHERE CASE
    WHEN NOT %(wait)s THEN
        EXISTS (
            SELECT 1 FROM {schema}.runlane_runs r
            WHERE r.environment = %(environment)s AND r.queue = q.name
              AND r.status IN ('queued', 'scheduled', 'retrying', 'released')
              AND r.run_at <= %(now)s
        )
        AND pg_try_advisory_xact_lock(hashtextextended(%(lock_prefix)s || q.name, 0))
    ELSE pg_advisory_xact_lock(hashtextextended(%(lock_prefix)s || q.name, 0)) IS NOT NULL
END;

-- name: occupied_capacity
SELECT count(*) AS n FROM {schema}.runlane_runs
WHERE environment = %(environment)s AND queue = %(queue)s
  AND coalesce(concurrency_key, '') = coalesce(%(concurrency_key)s::text, '')
  AND status IN ('running', 'cancellation_requested')
  AND lease_expires_at > %(now)s;
