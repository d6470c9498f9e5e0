-- Observing runs: reading the runs waiters wait for, and the progress tasks report.
-- Parameters are :named.

-- name: get_runs
-- The runs among :ids (a JSON array), for rl.runs.wait's one re-read of every run
-- its waiters wait for.
SELECT * FROM runlane_runs
WHERE environment = :environment AND id IN (SELECT value FROM json_each(:ids));

-- name: write_progress
-- Each attempt's latest value (:writes, a JSON array of objects with id, token,
-- attempt, fraction, message and data, the data as JSON text) on its run's row
-- (migration 017's progress array), fenced: stored only while the run is leased to that attempt with
-- an unexpired lease, so a value of an older attempt never replaces a newer one's.
-- The fenced runs are found first, each by primary key (CROSS JOIN keeps that order),
-- then updated by rowid. LIMIT -1 (no limit) keeps SQLite from flattening the
-- subquery into the update's join, where it scanned every run of the environment.
-- (Not a WITH statement: sqlite3 of Python 3.11 counts no rows changed by one.)
UPDATE runlane_runs
SET progress = json_array(w.attempt, w.fraction, w.message, json(w.data), :now)
FROM (
    SELECT r.rowid AS run_rowid, j.attempt, j.fraction, j.message, j.data
    FROM (
        SELECT json_extract(value, '$.id') AS id,
               json_extract(value, '$.token') AS token,
               json_extract(value, '$.attempt') AS attempt,
               json_extract(value, '$.fraction') AS fraction,
               json_extract(value, '$.message') AS message,
               json_extract(value, '$.data') AS data
        FROM json_each(:writes)
    ) AS j
    CROSS JOIN runlane_runs r ON r.environment = :environment AND r.id = j.id
    WHERE r.lease_token = j.token
      AND r.attempt = j.attempt
      AND (r.status = 'running' OR r.status = 'cancellation_requested')
      AND r.lease_expires_at > :now
    LIMIT -1
) AS w
WHERE runlane_runs.rowid = w.run_rowid;

-- name: get_progress
-- The data is read back as JSON text (json_quote keeps an object or array as it is
-- and quotes a string; no data reads as null).
SELECT id AS run_id,
       json_extract(progress, '$[0]') AS attempt,
       json_extract(progress, '$[1]') AS fraction,
       json_extract(progress, '$[2]') AS message,
       json_quote(json_extract(progress, '$[3]')) AS data,
       json_extract(progress, '$[4]') AS updated_at
FROM runlane_runs
WHERE environment = :environment AND id IN (SELECT value FROM json_each(:ids))
  AND progress IS NOT NULL;
