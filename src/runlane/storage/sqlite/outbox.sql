-- Delivery requests, bounded-queue reservations and the outbox.
-- Parameters are :named.

-- name: insert_outbox
INSERT INTO runlane_outbox (
    environment, id, run_id, queue, status, available_at, claimed_until, requested_at, trace_carrier
) VALUES (
    :environment, :id, :run_id, :queue, :status, :now, :claimed_until, :now, :trace_carrier
);

-- name: mark_delivery_requested
UPDATE runlane_runs
SET delivery_requested_at = :now, reserved_until = :reserved_until,
    event_sequence = event_sequence + 1
WHERE environment = :environment AND id = :id
RETURNING *;

-- name: undelivered_runs
-- Due runs without a delivery request. A delivery with a partition key is requested
-- only when claimable (contract 5.7.5, the rule of claim_run), at most one per key,
-- and not while another delivery of its key still waits on a request. The keyed
-- scan reads the partial runlane_runs_keyed index, which holds no task run.
SELECT id, queue, concurrency_key FROM (
    SELECT id, queue, concurrency_key, run_at FROM (
        SELECT id, queue, concurrency_key, run_at FROM runlane_runs
        WHERE environment = :environment
          AND queue IN (SELECT value FROM json_each(:queues))
          AND delivery_requested_at IS NULL
          AND (status = 'queued' OR status = 'scheduled' OR status = 'retrying'
               OR status = 'released')
          AND run_at <= :now
          AND partition_key IS NULL
        ORDER BY run_at, id
        LIMIT :limit
    )
    UNION ALL
    SELECT f.id, f.queue, f.concurrency_key, f.run_at FROM (
        SELECT k.id, k.queue, k.concurrency_key, k.run_at, k.task_id, k.partition_key,
               row_number() OVER (
                   PARTITION BY k.task_id, k.partition_key ORDER BY k.run_at, k.id
               ) AS rank_in_key
        FROM runlane_runs k INDEXED BY runlane_runs_keyed
        WHERE k.environment = :environment
          AND k.partition_key IS NOT NULL
          AND (k.status = 'queued' OR k.status = 'scheduled' OR k.status = 'retrying'
               OR k.status = 'released' OR k.status = 'running'
               OR k.status = 'cancellation_requested' OR k.status = 'dead_lettered')
          AND (k.status = 'queued' OR k.status = 'scheduled' OR k.status = 'retrying'
               OR k.status = 'released')
          AND k.queue IN (SELECT value FROM json_each(:queues))
          AND k.delivery_requested_at IS NULL
          AND k.run_at <= :now
          -- ORDERED: the key's head (no unfinished delivery before it).
          AND (k.subscription_mode <> 'ordered' OR NOT EXISTS (
              SELECT 1 FROM runlane_runs o
              WHERE o.environment = k.environment AND o.task_id = k.task_id
                AND o.partition_key = k.partition_key
                AND (o.status = 'queued' OR o.status = 'scheduled' OR o.status = 'retrying'
                     OR o.status = 'released' OR o.status = 'running'
                     OR o.status = 'cancellation_requested' OR o.status = 'dead_lettered')
                AND o.message_sequence < k.message_sequence
          ))
    ) f
    WHERE f.rank_in_key = 1
      -- No delivery of the key holds an unexpired lease or waits on a request.
      AND NOT EXISTS (
          SELECT 1 FROM runlane_runs o
          WHERE o.environment = :environment AND o.task_id = f.task_id
            AND o.partition_key = f.partition_key
            AND (o.status = 'queued' OR o.status = 'scheduled' OR o.status = 'retrying'
                 OR o.status = 'released' OR o.status = 'running'
                 OR o.status = 'cancellation_requested' OR o.status = 'dead_lettered')
            AND (((o.status = 'running' OR o.status = 'cancellation_requested')
                  AND o.lease_expires_at > :now)
                 OR ((o.status = 'queued' OR o.status = 'scheduled' OR o.status = 'retrying'
                      OR o.status = 'released')
                     AND o.delivery_requested_at IS NOT NULL))
      )
)
ORDER BY run_at, id
LIMIT :limit;

-- name: occupied_by_partition
SELECT queue, coalesce(concurrency_key, '') AS part, count(*) AS n FROM runlane_runs
WHERE environment = :environment
  AND queue IN (SELECT value FROM json_each(:queues))
  AND (((status = 'running' OR status = 'cancellation_requested') AND lease_expires_at > :now)
       OR ((status = 'queued' OR status = 'scheduled' OR status = 'retrying'
            OR status = 'released') AND reserved_until > :now))
GROUP BY queue, part;

-- name: expire_dispatch_reservations
UPDATE runlane_runs
SET reserved_until = NULL, delivery_requested_at = NULL
WHERE environment = :environment
  AND reserved_until IS NOT NULL AND reserved_until <= :now
  AND (status = 'queued' OR status = 'scheduled' OR status = 'retrying' OR status = 'released');

-- name: claim_outbox
UPDATE runlane_outbox
SET status = 'claimed', claimed_until = :claimed_until
WHERE environment = :environment AND id IN (
    SELECT id FROM runlane_outbox
    WHERE environment = :environment
      AND (((status = 'pending' OR status = 'failed') AND available_at <= :now)
           OR (status = 'claimed' AND claimed_until <= :now))
    ORDER BY available_at, id
    LIMIT :limit
)
RETURNING *;

-- name: mark_outbox_published
UPDATE runlane_outbox
SET status = 'published', published_at = :now, provider_message_id = :provider_message_id,
    attempts = attempts + 1, claimed_until = NULL
WHERE environment = :environment AND id = :id AND status = 'claimed';

-- name: mark_outbox_failed
UPDATE runlane_outbox
SET status = 'failed', available_at = :retry_at, last_error = :last_error,
    attempts = attempts + 1, claimed_until = NULL
WHERE environment = :environment AND id = :id AND status = 'claimed';

-- name: outbox_counts
SELECT status, count(*) AS n FROM runlane_outbox WHERE environment = :environment GROUP BY status;

-- name: outbox_backlog
-- Delivery requests not yet published (pending, claimed by a publisher, or failed and waiting).
SELECT queue, count(*) AS n FROM runlane_outbox
WHERE environment = :environment AND (status = 'pending' OR status = 'claimed'
                                      OR status = 'failed')
GROUP BY queue;
