-- Leases: extending one, finding the expired.
-- Parameters are %(named)s; {schema} is the quoted schema name.

-- name: heartbeat
UPDATE {schema}.runlane_runs
SET lease_expires_at = %(lease_expires_at)s
WHERE environment = %(environment)s AND id = %(id)s AND lease_token = %(lease_token)s
  AND status IN ('running', 'cancellation_requested')
  AND lease_expires_at > %(now)s
RETURNING status;

-- name: list_expired_leases
SELECT * FROM {schema}.runlane_runs
WHERE environment = %(environment)s
  AND status IN ('running', 'cancellation_requested')
  AND lease_expires_at <= %(now)s
ORDER BY lease_expires_at
LIMIT %(limit)s;
