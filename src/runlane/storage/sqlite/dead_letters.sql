-- Topics for operators: dead letters, counts per subscription, halted keys.
-- Parameters are :named.

-- name: list_dead_letters
-- Oldest dead letter first (then by id), after the cursor; blocks_key: an ORDERED
-- delivery with no unfinished delivery of its key before it (the key's head).
SELECT r.*,
       m.id AS message_id, m.topic AS message_topic, m.payload AS message_payload,
       m.attributes AS message_attributes, m.published_at AS message_published_at,
       m.trace_carrier AS message_trace_carrier,
       (r.subscription_mode = 'ordered' AND r.partition_key IS NOT NULL AND NOT EXISTS (
           SELECT 1 FROM runlane_runs e
           WHERE e.environment = r.environment AND e.task_id = r.task_id
             AND e.partition_key = r.partition_key
             AND (e.status = 'queued' OR e.status = 'scheduled' OR e.status = 'retrying'
                  OR e.status = 'released' OR e.status = 'running'
                  OR e.status = 'cancellation_requested' OR e.status = 'dead_lettered')
             AND e.message_sequence < r.message_sequence
       )) AS blocks_key
FROM runlane_runs r
JOIN runlane_messages m ON m.environment = r.environment AND m.sequence = r.message_sequence
WHERE r.environment = :environment AND r.status = 'dead_lettered'
  AND (:topic IS NULL OR m.topic = :topic)
  AND (:subscription IS NULL OR r.task_id = :subscription)
  AND (:partition_key IS NULL OR r.partition_key = :partition_key)
  AND (:run_id IS NULL OR r.id = :run_id)
  AND (:after_at IS NULL OR (r.dead_lettered_at, r.id) > (:after_at, :after_id))
ORDER BY r.dead_lettered_at, r.id
LIMIT :limit;

-- name: subscription_stats
-- Deliveries per subscription and status, and (status NULL) each subscription's
-- halted keys: ORDERED keys whose head is dead-lettered.
SELECT task_id, status, count(*) AS n
FROM runlane_runs
WHERE environment = :environment AND subscription_mode IS NOT NULL
  AND task_id IN (SELECT value FROM json_each(:subscriptions))
GROUP BY task_id, status
UNION ALL
SELECT r.task_id, NULL AS status, count(*) AS n
-- Dead-lettered runs of the subscription only (r.status = 'dead_lettered' also
-- matches runlane_runs_keyed, which would walk every unfinished keyed run).
FROM runlane_runs r INDEXED BY runlane_runs_deliveries
WHERE r.environment = :environment AND r.status = 'dead_lettered'
  AND r.subscription_mode = 'ordered' AND r.partition_key IS NOT NULL
  AND r.task_id IN (SELECT value FROM json_each(:subscriptions))
  AND NOT EXISTS (
      SELECT 1 FROM runlane_runs e
      WHERE e.environment = r.environment AND e.task_id = r.task_id
        AND e.partition_key = r.partition_key
        AND (e.status = 'queued' OR e.status = 'scheduled' OR e.status = 'retrying'
             OR e.status = 'released' OR e.status = 'running'
             OR e.status = 'cancellation_requested' OR e.status = 'dead_lettered')
        AND e.message_sequence < r.message_sequence
  )
GROUP BY r.task_id;

-- name: list_halted_keys
-- ORDERED keys of one subscription whose head is dead-lettered, by key, after the
-- cursor; waiting: the key's unfinished deliveries behind the head.
SELECT r.task_id, r.partition_key, r.id, r.dead_lettered_at,
       (SELECT count(*) FROM runlane_runs w
        WHERE w.environment = r.environment AND w.task_id = r.task_id
          AND w.partition_key = r.partition_key
          AND (w.status = 'queued' OR w.status = 'scheduled' OR w.status = 'retrying'
               OR w.status = 'released' OR w.status = 'running'
               OR w.status = 'cancellation_requested' OR w.status = 'dead_lettered')
          AND w.message_sequence > r.message_sequence) AS waiting
FROM runlane_runs r INDEXED BY runlane_runs_deliveries
WHERE r.environment = :environment AND r.task_id = :subscription
  AND r.status = 'dead_lettered' AND r.subscription_mode = 'ordered'
  AND r.partition_key IS NOT NULL
  AND (:cursor IS NULL OR r.partition_key > :cursor)
  AND NOT EXISTS (
      SELECT 1 FROM runlane_runs e
      WHERE e.environment = r.environment AND e.task_id = r.task_id
        AND e.partition_key = r.partition_key
        AND (e.status = 'queued' OR e.status = 'scheduled' OR e.status = 'retrying'
             OR e.status = 'released' OR e.status = 'running'
             OR e.status = 'cancellation_requested' OR e.status = 'dead_lettered')
        AND e.message_sequence < r.message_sequence
  )
ORDER BY r.partition_key
LIMIT :limit;
