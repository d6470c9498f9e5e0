-- Observing runs: reading the runs waiters wait for, and the progress tasks report.
-- Parameters are %(named)s; {schema} is the quoted schema name.

-- name: get_runs
-- The runs among %(ids)s, for rl.runs.wait's one re-read of every run its waiters
-- wait for.
SELECT * FROM {schema}.runlane_runs
WHERE environment = %(environment)s AND id = ANY(%(ids)s::text[]);

-- name: write_progress
-- Each attempt's latest value (%(writes)s, a JSON array of objects with id, token,
-- attempt, fraction, message and data, the data as JSON text), fenced: stored only
-- while the run is leased to that attempt with an unexpired lease. A value of an
-- older attempt never replaces a newer one's. The LATERAL lookup finds each run by
-- primary key, whatever the planner thinks of the leased runs.
INSERT INTO {schema}.runlane_run_progress AS p
    (environment, run_id, attempt, fraction, message, data, updated_at)
SELECT r.environment, r.id, r.attempt, w.fraction, w.message, w.data::jsonb, %(now)s
FROM jsonb_to_recordset(%(writes)s::jsonb)
    AS w(id TEXT, token TEXT, attempt INTEGER, fraction DOUBLE PRECISION, message TEXT, data TEXT)
CROSS JOIN LATERAL (
    SELECT environment, id, attempt FROM {schema}.runlane_runs
    WHERE id = w.id AND environment = %(environment)s
      AND lease_token = w.token
      AND attempt = w.attempt
      AND status IN ('running', 'cancellation_requested')
      AND lease_expires_at > %(now)s
    OFFSET 0
) AS r
ON CONFLICT (run_id, environment) DO UPDATE SET
    attempt = excluded.attempt,
    fraction = excluded.fraction,
    message = excluded.message,
    data = excluded.data,
    updated_at = excluded.updated_at
WHERE excluded.attempt >= p.attempt;

-- name: get_progress
SELECT run_id, attempt, fraction, message, data, updated_at
FROM {schema}.runlane_run_progress
WHERE environment = %(environment)s AND run_id = ANY(%(ids)s::text[]);
