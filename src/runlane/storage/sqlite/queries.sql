-- Named queries of the SQLite driver. Parameters are :named, except the migration
-- ledger's (version, name), which are positional.

-- name: create_migrations_table
CREATE TABLE IF NOT EXISTS runlane_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL);

-- name: applied_migrations
SELECT version FROM runlane_migrations;

-- name: record_migration
INSERT INTO runlane_migrations VALUES (?, ?, strftime('%s','now') * 1000000);

-- name: insert_run
INSERT INTO runlane_runs (
    environment, id, task_id, queue, status, payload, attempt, failure_count,
    run_at, created_at, updated_at, event_sequence, source, idempotency_key,
    singleton_key, concurrency_key, trace_carrier, lease_owner, lease_token, lease_expires_at,
    delivery_requested_at
) VALUES (
    :environment, :id, :task_id, :queue, :status, :payload, :attempt, 0,
    :run_at, :now, :now, :event_sequence, :source, :idempotency_key,
    :singleton_key, :concurrency_key, :trace_carrier, :lease_owner, :lease_token, :lease_expires_at,
    :delivery_requested_at
)
ON CONFLICT DO NOTHING
RETURNING *;

-- name: insert_plain_run
INSERT INTO runlane_runs (
    environment, id, task_id, queue, status, payload, attempt, failure_count,
    run_at, created_at, updated_at, event_sequence, source, concurrency_key, trace_carrier,
    delivery_requested_at
) VALUES (
    :environment, :id, :task_id, :queue, :status, :payload, 0, 0,
    :run_at, :now, :now, :event_sequence, :source, :concurrency_key, :trace_carrier,
    :delivery_requested_at
);

-- name: insert_event
INSERT INTO runlane_run_events (environment, run_id, sequence, type, occurred_at, data)
VALUES (:environment, :run_id, :sequence, :type, :occurred_at, :data);

-- name: get_run
SELECT * FROM runlane_runs WHERE environment = :environment AND id = :id;

-- name: get_active_singleton_owner
SELECT * FROM runlane_runs
WHERE environment = :environment AND task_id = :task_id AND singleton_key = :singleton_key
  AND status IN ('queued', 'scheduled', 'running', 'retrying', 'released', 'cancellation_requested');

-- name: get_idempotency_owner
SELECT k.expires_at AS key_expires_at, r.*
FROM runlane_idempotency_keys k
LEFT JOIN runlane_runs r ON r.environment = k.environment AND r.id = k.run_id
WHERE k.environment = :environment AND k.task_id = :task_id AND k.key = :key;

-- name: upsert_idempotency_key
INSERT INTO runlane_idempotency_keys (environment, task_id, key, run_id, expires_at)
VALUES (:environment, :task_id, :key, :run_id, :expires_at)
ON CONFLICT (environment, task_id, key) DO UPDATE
    SET run_id = excluded.run_id, expires_at = excluded.expires_at;

-- name: lease_candidates
-- Not a statement on its own: the head of every claim, which queries.py closes
-- around one of the *_candidates queries below (they choose which runs).
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

-- name: due_candidates
SELECT id FROM runlane_runs
WHERE environment = :environment
  AND queue = :queue
  AND status IN ('queued', 'scheduled', 'retrying', 'released')
  AND run_at <= :now
ORDER BY run_at, id
LIMIT :limit

-- name: bounded_candidates
-- Bounded queues: per (queue, concurrency key) partition, claim at most the limit
-- minus the runs that hold an active lease. Callers hold the write lock, so the
-- count cannot change under us.
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

-- name: occupied_capacity
SELECT count(*) AS n FROM runlane_runs
WHERE environment = :environment AND queue = :queue
  AND coalesce(concurrency_key, '') = coalesce(:concurrency_key, '')
  AND status IN ('running', 'cancellation_requested')
  AND lease_expires_at > :now;

-- name: run_candidate
SELECT id FROM runlane_runs
WHERE environment = :environment AND id = :id
  AND status IN ('queued', 'scheduled', 'retrying', 'released')
  AND run_at <= :now

-- name: heartbeat
UPDATE runlane_runs
SET lease_expires_at = :lease_expires_at
WHERE environment = :environment AND id = :id AND lease_token = :lease_token
  AND status IN ('running', 'cancellation_requested')
  AND lease_expires_at > :now
RETURNING status;

-- name: apply_transition
UPDATE runlane_runs
SET status = :status,
    run_at = COALESCE(:run_at, run_at),
    result = :result,
    failure = :failure,
    cancel_reason = :cancel_reason,
    failure_count = failure_count + :add_failure,
    event_sequence = event_sequence + :event_count,
    updated_at = :now,
    delivery_requested_at = NULL,
    lease_owner = CASE WHEN :keep_lease THEN lease_owner END,
    lease_token = CASE WHEN :keep_lease THEN lease_token END,
    lease_expires_at = CASE WHEN :keep_lease THEN lease_expires_at END
WHERE environment = :environment AND id = :id
  AND event_sequence = :expected_sequence
  AND (:lease_token IS NULL OR lease_token = :lease_token)
  AND (:lease_expired_by IS NULL OR lease_expires_at <= :lease_expired_by);

-- name: list_run_events
SELECT * FROM runlane_run_events
WHERE environment = :environment AND run_id = :run_id
ORDER BY sequence;

-- name: list_expired_leases
SELECT * FROM runlane_runs
WHERE environment = :environment
  AND status IN ('running', 'cancellation_requested')
  AND lease_expires_at <= :now
ORDER BY lease_expires_at
LIMIT :limit;

-- name: release_expired_idempotency_keys
DELETE FROM runlane_idempotency_keys
WHERE environment = :environment AND (task_id, key) IN (
    SELECT k.task_id, k.key FROM runlane_idempotency_keys k
    LEFT JOIN runlane_runs r ON r.environment = k.environment AND r.id = k.run_id
    WHERE k.environment = :environment
      AND (r.id IS NULL
           OR (r.status IN ('succeeded', 'failed', 'cancelled')
               AND (r.status = 'failed' OR k.expires_at IS NULL OR k.expires_at <= :now)))
);

-- name: reset_idempotency_key
DELETE FROM runlane_idempotency_keys
WHERE environment = :environment AND task_id = :task_id AND key = :key;

-- name: prune_runs
DELETE FROM runlane_runs
WHERE environment = :environment AND id IN (
    SELECT id FROM runlane_runs
    WHERE environment = :environment
      AND status IN (SELECT value FROM json_each(:statuses))
      AND updated_at < :older_than
    LIMIT :limit
)
RETURNING id;

-- name: delete_run_events
DELETE FROM runlane_run_events
WHERE environment = :environment AND run_id IN (SELECT value FROM json_each(:run_ids));

-- name: delete_idempotency_keys_of_runs
DELETE FROM runlane_idempotency_keys
WHERE environment = :environment AND run_id IN (SELECT value FROM json_each(:run_ids));

-- name: delete_outbox_of_runs
DELETE FROM runlane_outbox
WHERE environment = :environment AND run_id IN (SELECT value FROM json_each(:run_ids));

-- name: delete_schedule_occurrences_of_runs
-- A pruned run's slot lies long before its schedule's last_slot, so no tick
-- proposes it again: its occurrence row has done its job.
DELETE FROM runlane_schedule_occurrences
WHERE environment = :environment AND run_id IN (SELECT value FROM json_each(:run_ids));

-- name: queue_stats
-- "occupying": runs holding capacity now (an unexpired lease or dispatch reservation).
SELECT queue, concurrency_key, status, count(*) AS count,
       sum(CASE
               WHEN status IN ('running', 'cancellation_requested') AND lease_expires_at > :now
                   THEN 1
               WHEN status IN ('queued', 'scheduled', 'retrying', 'released')
                    AND reserved_until > :now
                   THEN 1
               ELSE 0
           END) AS occupying,
       sum(CASE
               WHEN status IN ('queued', 'scheduled', 'retrying', 'released') AND run_at <= :now
                   THEN 1
               ELSE 0
           END) AS due,
       min(CASE
               WHEN status IN ('queued', 'scheduled', 'retrying', 'released') AND run_at <= :now
                   THEN run_at
           END) AS oldest_due
FROM runlane_runs
WHERE environment = :environment
GROUP BY queue, concurrency_key, status;

-- name: count_finished_runs
-- Finished runs per queue and status whose last update is at or after :since.
SELECT queue, status, count(*) AS n
FROM runlane_runs
WHERE environment = :environment
  AND status IN ('succeeded', 'failed', 'cancelled')
  AND updated_at >= :since
GROUP BY queue, status;

-- name: hold_maintenance_lead
-- Taken when free or expired, renewed by its holder; a row comes back only then.
INSERT INTO runlane_maintenance_leaders (environment, holder, expires_at)
VALUES (:environment, :holder, :expires_at)
ON CONFLICT (environment) DO UPDATE
    SET holder = excluded.holder, expires_at = excluded.expires_at
    WHERE runlane_maintenance_leaders.holder = excluded.holder
       OR runlane_maintenance_leaders.expires_at <= :now
RETURNING holder;

-- name: release_maintenance_lead
DELETE FROM runlane_maintenance_leaders WHERE environment = :environment AND holder = :holder;

-- name: get_schedule_states
SELECT schedule_id, last_slot, paused, first_seen FROM runlane_schedules
WHERE environment = :environment;

-- name: mark_schedule_seen
-- Concurrent first ticks: the earliest first-seen point stays.
INSERT INTO runlane_schedules (environment, schedule_id, last_slot, paused, updated_at, first_seen)
VALUES (:environment, :schedule_id, NULL, 0, :now, :now)
ON CONFLICT (environment, schedule_id) DO UPDATE
    SET first_seen = min(coalesce(runlane_schedules.first_seen, excluded.first_seen), excluded.first_seen),
        updated_at = excluded.updated_at;

-- name: set_schedule_paused
INSERT INTO runlane_schedules (environment, schedule_id, last_slot, paused, updated_at)
VALUES (:environment, :schedule_id, NULL, :paused, :now)
ON CONFLICT (environment, schedule_id) DO UPDATE
    SET paused = excluded.paused, updated_at = excluded.updated_at;

-- name: claim_schedule_occurrence
INSERT INTO runlane_schedule_occurrences (environment, schedule_id, slot, run_id, created_at)
VALUES (:environment, :schedule_id, :slot, :run_id, :now)
ON CONFLICT DO NOTHING
RETURNING run_id;

-- name: advance_schedule
INSERT INTO runlane_schedules (environment, schedule_id, last_slot, paused, updated_at)
VALUES (:environment, :schedule_id, :slot, 0, :now)
ON CONFLICT (environment, schedule_id) DO UPDATE
    SET last_slot = max(coalesce(runlane_schedules.last_slot, excluded.last_slot), excluded.last_slot),
        updated_at = excluded.updated_at;

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
SELECT id, queue, concurrency_key FROM runlane_runs
WHERE environment = :environment
  AND queue IN (SELECT value FROM json_each(:queues))
  AND delivery_requested_at IS NULL
  AND status IN ('queued', 'scheduled', 'retrying', 'released')
  AND run_at <= :now
ORDER BY run_at, id
LIMIT :limit;

-- name: occupied_by_partition
SELECT queue, coalesce(concurrency_key, '') AS part, count(*) AS n FROM runlane_runs
WHERE environment = :environment
  AND queue IN (SELECT value FROM json_each(:queues))
  AND ((status IN ('running', 'cancellation_requested') AND lease_expires_at > :now)
       OR (status IN ('queued', 'scheduled', 'retrying', 'released') AND reserved_until > :now))
GROUP BY queue, part;

-- name: expire_dispatch_reservations
UPDATE runlane_runs
SET reserved_until = NULL, delivery_requested_at = NULL
WHERE environment = :environment
  AND reserved_until IS NOT NULL AND reserved_until <= :now
  AND status IN ('queued', 'scheduled', 'retrying', 'released');

-- name: claim_outbox
UPDATE runlane_outbox
SET status = 'claimed', claimed_until = :claimed_until
WHERE environment = :environment AND id IN (
    SELECT id FROM runlane_outbox
    WHERE environment = :environment
      AND ((status IN ('pending', 'failed') AND available_at <= :now)
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
WHERE environment = :environment AND status IN ('pending', 'claimed', 'failed')
GROUP BY queue;
