-- Paused queues (flow control, 7.3).
-- Parameters are :named.

-- name: pause_queue
-- A queue paused again keeps its first pause: the time it stopped starting runs.
INSERT INTO runlane_queue_pauses (environment, queue, paused_at, reason)
VALUES (:environment, :queue, :now, :reason)
ON CONFLICT (environment, queue) DO NOTHING;

-- name: get_queue_pause
SELECT queue, paused_at, reason FROM runlane_queue_pauses
WHERE environment = :environment AND queue = :queue;

-- name: list_queue_pauses
SELECT queue, paused_at, reason FROM runlane_queue_pauses
WHERE environment = :environment
ORDER BY queue;

-- name: resume_queue
DELETE FROM runlane_queue_pauses
WHERE environment = :environment AND queue = :queue;

-- name: forget_paused_delivery_requests
-- Resuming: the queue's waiting runs had their wakeups ignored while it was paused
-- (and bounded queues' reservations held for them); drop both, so the next request
-- for due deliveries wakes each run again, within capacity.
UPDATE runlane_runs
SET reserved_until = NULL, delivery_requested_at = NULL
WHERE environment = :environment AND queue = :queue
  AND delivery_requested_at IS NOT NULL
  AND (status = 'queued' OR status = 'scheduled' OR status = 'retrying' OR status = 'released');

-- name: queue_is_paused
-- A claim on a queue limited per key asks first (its runs are claimed one by one).
SELECT 1 FROM runlane_queue_pauses WHERE environment = :environment AND queue = :queue;
