-- Observing runs: reading the runs waiters wait for, and the progress tasks report.
-- Parameters are %(named)s; {schema} is the quoted schema name.

-- name: get_runs
-- The runs among %(ids)s, for rl.runs.wait's one re-read of every run its waiters
-- wait for.
SELECT * FROM {schema}.runlane_runs
WHERE environment = %(environment)s AND id = ANY(%(ids)s::text[]);

-- name: write_progress
-- Each attempt's latest value (%(writes)s, a JSON array of objects with id, token,
-- attempt, fraction, message and data, the data as JSON text) on its run's row
-- (migration 018), fenced: stored only while the run is leased to that attempt with
-- an unexpired lease, so a value of an older attempt never replaces a newer one's.
-- The ids also come as an array so the runs are found by primary key whatever the
-- planner thinks of the leased runs.
UPDATE {schema}.runlane_runs r
SET progress_attempt = w.attempt,
    progress_fraction = w.fraction,
    progress_message = w.message,
    progress_data = w.data::jsonb,
    progress_at = %(now)s
FROM jsonb_to_recordset(%(writes)s::jsonb)
    AS w(id TEXT, token TEXT, attempt INTEGER, fraction DOUBLE PRECISION, message TEXT, data TEXT)
WHERE r.environment = %(environment)s AND r.id = w.id
  AND r.id = ANY(%(ids)s::text[])
  AND r.lease_token = w.token
  AND r.attempt = w.attempt
  AND r.status IN ('running', 'cancellation_requested')
  AND r.lease_expires_at > %(now)s;

-- name: get_progress
SELECT id AS run_id, progress_attempt AS attempt, progress_fraction AS fraction,
       progress_message AS message, progress_data AS data, progress_at AS updated_at
FROM {schema}.runlane_runs
WHERE environment = %(environment)s AND id = ANY(%(ids)s::text[])
  AND progress_at IS NOT NULL;
