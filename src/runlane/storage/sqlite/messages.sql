-- Topics: publishing messages with their deduplication entries and delivery runs.
-- Parameters are :named.

-- name: get_live_deduplication_entry
-- The message a deduplication key still holds at :now (none once its window ended).
SELECT m.* FROM runlane_deduplication_keys d
JOIN runlane_messages m ON m.environment = d.environment AND m.id = d.message_id
WHERE d.environment = :environment AND d.topic = :topic AND d.key = :key
  AND d.expires_at > :now;

-- name: get_message
SELECT * FROM runlane_messages WHERE environment = :environment AND id = :id;

-- name: get_messages
SELECT * FROM runlane_messages
WHERE environment = :environment AND id IN (SELECT value FROM json_each(:ids));

-- name: next_message_sequence
-- Writers are serialised, so the sequence drawn here follows commit order.
INSERT INTO runlane_message_sequences (environment, last_sequence)
VALUES (:environment, 1)
ON CONFLICT (environment) DO UPDATE SET last_sequence = last_sequence + 1
RETURNING last_sequence;

-- name: next_message_sequences
-- Draw :count sequences at once (the last comes back; the others precede it).
INSERT INTO runlane_message_sequences (environment, last_sequence)
VALUES (:environment, :count)
ON CONFLICT (environment) DO UPDATE SET last_sequence = last_sequence + :count
RETURNING last_sequence;

-- name: insert_next_message
-- The message with the next sequence of its environment, unless its id is stored
-- (then nothing comes back). Writers are serialised: the caller advances the
-- counter to it with next_message_sequence once it is in.
INSERT INTO runlane_messages (
    environment, id, topic, payload, attributes, envelope, published_at, window_ends_at,
    trace_carrier, sequence
)
SELECT :environment, :id, :topic, :payload, :attributes, :envelope, :published_at,
       :window_ends_at, :trace_carrier,
       coalesce(
           (SELECT last_sequence FROM runlane_message_sequences
            WHERE environment = :environment), 0
       ) + 1
WHERE true
ON CONFLICT (environment, id) DO NOTHING
RETURNING sequence;

-- name: insert_message
INSERT INTO runlane_messages (
    environment, id, topic, payload, attributes, envelope, published_at, window_ends_at,
    trace_carrier, sequence
) VALUES (
    :environment, :id, :topic, :payload, :attributes, :envelope, :published_at,
    :window_ends_at, :trace_carrier, :sequence
);

-- name: upsert_deduplication_key
-- Only a key whose window ended is replaced (the caller checked it holds none now).
INSERT INTO runlane_deduplication_keys (
    environment, topic, key, message_id, published_at, expires_at
) VALUES (:environment, :topic, :key, :message_id, :published_at, :expires_at)
ON CONFLICT (environment, topic, key) DO UPDATE
SET message_id = excluded.message_id, published_at = excluded.published_at,
    expires_at = excluded.expires_at
WHERE runlane_deduplication_keys.expires_at <= :now;

-- name: delivery_key_is_free
-- Whether a new delivery of (task_id, partition_key) at :sequence is claimable at
-- once (5.7): EXCLUSIVE, no delivery of the key holds an unexpired lease; ORDERED,
-- also no unfinished delivery of the key comes before it.
SELECT NOT EXISTS (
    SELECT 1 FROM runlane_runs
    WHERE environment = :environment AND task_id = :task_id AND partition_key = :partition_key
      AND (status = 'queued' OR status = 'scheduled' OR status = 'retrying'
           OR status = 'released' OR status = 'running' OR status = 'cancellation_requested'
           OR status = 'dead_lettered')
      AND message_sequence < :sequence
      AND (:ordered
           OR ((status = 'running' OR status = 'cancellation_requested')
               AND lease_expires_at > :now))
) AS free;

-- name: insert_delivery
INSERT INTO runlane_runs (
    environment, id, task_id, queue, status, payload, attempt, failure_count,
    run_at, first_run_at, created_at, updated_at, event_sequence, source, trace_carrier,
    delivery_requested_at, partition_key, replays, subscription_mode, message_sequence,
    rate_key
) VALUES (
    :environment, :id, :task_id, :queue, 'queued', :payload, 0, 0,
    :now, :now, :now, :now, :event_sequence, :source, :trace_carrier,
    :delivery_requested_at, :partition_key, 0, :subscription_mode, :message_sequence,
    :rate_key
)
ON CONFLICT DO NOTHING;

-- name: runs_of_message
SELECT * FROM runlane_runs
WHERE environment = :environment AND message_sequence = :sequence
ORDER BY id;

-- name: release_expired_deduplication_keys
DELETE FROM runlane_deduplication_keys
WHERE environment = :environment AND expires_at <= :now;
