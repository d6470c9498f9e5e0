-- Idempotency keys: who owns a key, taking it, releasing it.
-- Parameters are :named.

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

-- name: release_expired_idempotency_keys
DELETE FROM runlane_idempotency_keys
WHERE environment = :environment AND (task_id, key) IN (
    SELECT k.task_id, k.key FROM runlane_idempotency_keys k
    LEFT JOIN runlane_runs r ON r.environment = k.environment AND r.id = k.run_id
    WHERE k.environment = :environment
      AND (r.id IS NULL
           OR ((r.status = 'succeeded' OR r.status = 'failed' OR r.status = 'cancelled'
                OR r.status = 'discarded')
               AND (r.status = 'failed' OR k.expires_at IS NULL OR k.expires_at <= :now)))
);

-- name: reset_idempotency_key
DELETE FROM runlane_idempotency_keys
WHERE environment = :environment AND task_id = :task_id AND key = :key;
