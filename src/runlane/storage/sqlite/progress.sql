-- Observing runs: reading the runs waiters wait for, and the progress tasks report.
-- Parameters are :named.

-- name: get_runs
-- The runs among :ids (a JSON array), for rl.runs.wait's one re-read of every run
-- its waiters wait for.
SELECT * FROM runlane_runs
WHERE environment = :environment AND id IN (SELECT value FROM json_each(:ids));

-- name: write_progress
-- Each attempt's latest value (:writes, a JSON array of objects with id, token,
-- attempt, fraction, message and data, the data as JSON text), fenced: stored only
-- while the run is leased to that attempt with an unexpired lease. A value of an
-- older attempt never replaces a newer one's. CROSS JOIN keeps the order written:
-- each write finds its run by primary key (left to the planner, it scanned the
-- leased runs once per write).
INSERT INTO runlane_run_progress (environment, run_id, attempt, fraction, message, data, updated_at)
SELECT r.environment, r.id, r.attempt, w.fraction, w.message, w.data, :now
FROM (
    SELECT json_extract(value, '$.id') AS id,
           json_extract(value, '$.token') AS token,
           json_extract(value, '$.attempt') AS attempt,
           json_extract(value, '$.fraction') AS fraction,
           json_extract(value, '$.message') AS message,
           json_extract(value, '$.data') AS data
    FROM json_each(:writes)
) AS w
CROSS JOIN runlane_runs r ON r.environment = :environment AND r.id = w.id
WHERE r.lease_token = w.token
  AND r.attempt = w.attempt
  AND (r.status = 'running' OR r.status = 'cancellation_requested')
  AND r.lease_expires_at > :now
ON CONFLICT (environment, run_id) DO UPDATE SET
    attempt = excluded.attempt,
    fraction = excluded.fraction,
    message = excluded.message,
    data = excluded.data,
    updated_at = excluded.updated_at
WHERE excluded.attempt >= runlane_run_progress.attempt;

-- name: write_settled_progress
-- An attempt's last value, written by apply_transitions with the transition that
-- settles the attempt, once that transition applied: its compare-and-set on the
-- lease token is the fence, so no lease is checked here (the lease is already
-- cleared). A value of an older attempt never replaces a newer one's.
INSERT INTO runlane_run_progress (environment, run_id, attempt, fraction, message, data, updated_at)
VALUES (:environment, :run_id, :attempt, :fraction, :message, :data, :now)
ON CONFLICT (environment, run_id) DO UPDATE SET
    attempt = excluded.attempt,
    fraction = excluded.fraction,
    message = excluded.message,
    data = excluded.data,
    updated_at = excluded.updated_at
WHERE excluded.attempt >= runlane_run_progress.attempt;

-- name: get_progress
SELECT run_id, attempt, fraction, message, data, updated_at FROM runlane_run_progress
WHERE environment = :environment AND run_id IN (SELECT value FROM json_each(:ids));
