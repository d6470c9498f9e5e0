-- Leases: extending one, finding the expired.
-- Parameters are :named.

-- name: heartbeat
UPDATE runlane_runs
SET lease_expires_at = :lease_expires_at
WHERE environment = :environment AND id = :id AND lease_token = :lease_token
  AND (status = 'running' OR status = 'cancellation_requested')
  AND lease_expires_at > :now
RETURNING status;

-- name: list_expired_leases
SELECT * FROM runlane_runs
WHERE environment = :environment
  AND (status = 'running' OR status = 'cancellation_requested')
  AND lease_expires_at <= :now
ORDER BY lease_expires_at
LIMIT :limit;
