-- Paused queues (flow control, 7.3).
-- Parameters are %(named)s; {schema} is the quoted schema name.

-- name: pause_queue
-- A queue paused again keeps its first pause: the time it stopped starting runs.
WITH inserted AS (
    INSERT INTO {schema}.runlane_queue_pauses (environment, queue, paused_at, reason)
    VALUES (%(environment)s, %(queue)s, %(now)s, %(reason)s)
    ON CONFLICT (environment, queue) DO NOTHING
    RETURNING queue, paused_at, reason
)
SELECT queue, paused_at, reason FROM inserted
UNION ALL
SELECT queue, paused_at, reason FROM {schema}.runlane_queue_pauses
WHERE environment = %(environment)s AND queue = %(queue)s
  AND NOT EXISTS (SELECT 1 FROM inserted);

-- name: announce_pauses
-- Tell every process's listener that the environment's pauses changed: their workers
-- read them again at once, and idle ones wake (a resumed queue's runs start now).
SELECT pg_notify(%(channel)s, %(environment)s || ':pauses');

-- name: list_queue_pauses
SELECT queue, paused_at, reason FROM {schema}.runlane_queue_pauses
WHERE environment = %(environment)s
ORDER BY queue;

-- name: resume_queue
-- Resuming: the queue's waiting runs had their wakeups ignored while it was paused
-- (and bounded queues' reservations held for them); drop both in the same statement,
-- so the next request for due deliveries wakes each run again, within capacity.
WITH resumed AS (
    DELETE FROM {schema}.runlane_queue_pauses
    WHERE environment = %(environment)s AND queue = %(queue)s
    RETURNING queue
),
forgotten AS (
    UPDATE {schema}.runlane_runs r
    SET reserved_until = NULL, delivery_requested_at = NULL
    FROM resumed
    WHERE r.environment = %(environment)s AND r.queue = resumed.queue
      AND r.delivery_requested_at IS NOT NULL
      AND r.status IN ('queued', 'scheduled', 'retrying', 'released')
    RETURNING r.id
)
SELECT count(*) AS resumed, (SELECT count(*) FROM forgotten) AS forgotten FROM resumed;
