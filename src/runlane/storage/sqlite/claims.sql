-- Claims of the SQLite driver, each a whole statement: lease the runs it chooses
-- and return them (the caller appends run.started). Callers hold the write lock
-- (IMMEDIATE transactions), so a bounded queue's count cannot change under them.
-- All three lease alike; only the choice of runs differs.

-- name: claim_due_runs
UPDATE runlane_runs
SET status = 'running',
    attempt = attempt + 1,
    event_sequence = event_sequence + 1,
    lease_owner = :worker_id,
    lease_token = :lease_token,
    lease_expires_at = :lease_expires_at,
    reserved_until = NULL,
    updated_at = :now
WHERE environment = :environment AND id IN (
    SELECT id FROM runlane_runs
    WHERE environment = :environment
      AND queue = :queue
      AND status IN ('queued', 'scheduled', 'retrying', 'released')
      AND run_at <= :now
    ORDER BY run_at, id
    LIMIT :limit
)
RETURNING *;

-- name: claim_bounded_runs
-- Bounded queues: per (queue, concurrency key) partition, claim at most the limit
-- minus the runs that hold an active lease. Callers hold the write lock, so the
-- count cannot change under us.
UPDATE runlane_runs
SET status = 'running',
    attempt = attempt + 1,
    event_sequence = event_sequence + 1,
    lease_owner = :worker_id,
    lease_token = :lease_token,
    lease_expires_at = :lease_expires_at,
    reserved_until = NULL,
    updated_at = :now
WHERE environment = :environment AND id IN (
    SELECT c.id FROM (
        SELECT r.id, r.queue, r.run_at, q.lim, coalesce(r.concurrency_key, '') AS part,
               row_number() OVER (
                   PARTITION BY r.queue, coalesce(r.concurrency_key, '') ORDER BY r.run_at, r.id
               ) AS rn
        FROM runlane_runs r
        JOIN (
            SELECT json_extract(value, '$[0]') AS queue, json_extract(value, '$[1]') AS lim
            FROM json_each(:bounded)
        ) q ON q.queue = r.queue
        WHERE r.environment = :environment
          AND r.status IN ('queued', 'scheduled', 'retrying', 'released')
          AND r.run_at <= :now
    ) c
    LEFT JOIN (
        SELECT queue, coalesce(concurrency_key, '') AS part, count(*) AS n
        FROM runlane_runs
        WHERE environment = :environment
          AND queue IN (SELECT json_extract(value, '$[0]') FROM json_each(:bounded))
          AND status IN ('running', 'cancellation_requested')
          AND lease_expires_at > :now
        GROUP BY queue, part
    ) o ON o.queue = c.queue AND o.part = c.part
    WHERE c.rn <= c.lim - coalesce(o.n, 0)
    ORDER BY c.run_at, c.id
    LIMIT :limit
)
RETURNING *;

-- name: claim_run
UPDATE runlane_runs
SET status = 'running',
    attempt = attempt + 1,
    event_sequence = event_sequence + 1,
    lease_owner = :worker_id,
    lease_token = :lease_token,
    lease_expires_at = :lease_expires_at,
    reserved_until = NULL,
    updated_at = :now
WHERE environment = :environment AND id IN (
    SELECT id FROM runlane_runs
    WHERE environment = :environment AND id = :id
      AND status IN ('queued', 'scheduled', 'retrying', 'released')
      AND run_at <= :now
)
RETURNING *;

-- name: occupied_capacity
SELECT count(*) AS n FROM runlane_runs
WHERE environment = :environment AND queue = :queue
  AND coalesce(concurrency_key, '') = coalesce(:concurrency_key, '')
  AND status IN ('running', 'cancellation_requested')
  AND lease_expires_at > :now;
