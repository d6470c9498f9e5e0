-- Idempotency keys: who owns a key, taking it, releasing it.
-- Parameters are %(named)s; {schema} is the quoted schema name.

-- name: lock_idempotency_key
-- Take the key for a new run, or lock the existing ownership row (waiting for a
-- concurrent trigger of the same key to finish) and return its owner.
INSERT INTO {schema}.runlane_idempotency_keys AS k (environment, task_id, key, run_id, expires_at)
VALUES (%(environment)s, %(task_id)s, %(key)s, %(run_id)s, %(expires_at)s)
ON CONFLICT (environment, task_id, key) DO UPDATE SET run_id = k.run_id
RETURNING run_id, expires_at AS key_expires_at;

-- name: take_idempotency_key
UPDATE {schema}.runlane_idempotency_keys
SET run_id = %(run_id)s, expires_at = %(expires_at)s
WHERE environment = %(environment)s AND task_id = %(task_id)s AND key = %(key)s;

-- name: drop_idempotency_key_of_run
DELETE FROM {schema}.runlane_idempotency_keys
WHERE environment = %(environment)s AND task_id = %(task_id)s AND key = %(key)s
  AND run_id = %(run_id)s;

-- name: release_expired_idempotency_keys
-- Pick stale ownership first, then delete only rows still naming the same run: a
-- trigger that took the key over meanwhile keeps it.
WITH stale AS (
    SELECT k.task_id, k.key, k.run_id
    FROM {schema}.runlane_idempotency_keys k
    LEFT JOIN {schema}.runlane_runs r ON r.environment = k.environment AND r.id = k.run_id
    WHERE k.environment = %(environment)s
      AND (r.id IS NULL
           OR (r.status IN ('succeeded', 'failed', 'cancelled', 'discarded')
               AND (r.status = 'failed' OR k.expires_at IS NULL OR k.expires_at <= %(now)s)))
)
DELETE FROM {schema}.runlane_idempotency_keys k
USING stale
WHERE k.environment = %(environment)s AND k.task_id = stale.task_id
  AND k.key = stale.key AND k.run_id = stale.run_id;

-- name: reset_idempotency_key
DELETE FROM {schema}.runlane_idempotency_keys
WHERE environment = %(environment)s AND task_id = %(task_id)s AND key = %(key)s;
