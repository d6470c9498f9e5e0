-- Runs and their events: creating, reading, listing, counting.
-- Parameters are :named.

-- name: insert_run
-- A run created leased (run_now) implies its run.started, the last of its events.
INSERT INTO runlane_runs (
    environment, id, task_id, queue, status, payload, attempt, failure_count,
    run_at, first_run_at, created_at, updated_at, event_sequence, source, idempotency_key,
    singleton_key, concurrency_key, trace_carrier, lease_owner, lease_token, lease_expires_at,
    delivery_requested_at, priority, priority_offset, started_sequence, started_at, started_by,
    started_lease_expires_at, rate_key
) VALUES (
    :environment, :id, :task_id, :queue, :status, :payload, :attempt, 0,
    :run_at, :run_at, :now, :now, :event_sequence, :source, :idempotency_key,
    :singleton_key, :concurrency_key, :trace_carrier, :lease_owner, :lease_token, :lease_expires_at,
    :delivery_requested_at, :priority, :priority_offset,
    CASE WHEN :lease_owner IS NOT NULL THEN :event_sequence END,
    CASE WHEN :lease_owner IS NOT NULL THEN :now END,
    :lease_owner, :lease_expires_at, :rate_key
)
ON CONFLICT DO NOTHING
RETURNING *;

-- name: insert_plain_run
-- A lone trigger's statement: runs with a rate key take insert_plain_keyed_run, so
-- the others bind nothing more for it.
INSERT INTO runlane_runs (
    environment, id, task_id, queue, status, payload, attempt, failure_count,
    run_at, first_run_at, created_at, updated_at, event_sequence, source, concurrency_key,
    trace_carrier, delivery_requested_at, priority, priority_offset
) VALUES (
    :environment, :id, :task_id, :queue, :status, :payload, 0, 0,
    :run_at, :run_at, :now, :now, :event_sequence, :source, :concurrency_key,
    :trace_carrier, :delivery_requested_at, :priority, :priority_offset
);

-- name: insert_plain_keyed_run
INSERT INTO runlane_runs (
    environment, id, task_id, queue, status, payload, attempt, failure_count,
    run_at, first_run_at, created_at, updated_at, event_sequence, source, concurrency_key,
    trace_carrier, delivery_requested_at, priority, priority_offset, rate_key
) VALUES (
    :environment, :id, :task_id, :queue, :status, :payload, 0, 0,
    :run_at, :run_at, :now, :now, :event_sequence, :source, :concurrency_key,
    :trace_carrier, :delivery_requested_at, :priority, :priority_offset, :rate_key
);

-- name: insert_plain_runs
-- Many runs that differ only in id and payload: :rows is a JSON array of
-- [id, payload text] pairs, everything else is bound once for the whole batch,
-- so SQLite walks the batch in C instead of binding every column of every row.
INSERT INTO runlane_runs (
    environment, id, task_id, queue, status, payload, attempt, failure_count,
    run_at, first_run_at, created_at, updated_at, event_sequence, source, concurrency_key,
    trace_carrier, delivery_requested_at, priority, priority_offset, rate_key
)
SELECT :environment, json_extract(row.value, '$[0]'), :task_id, :queue, :status,
       json_extract(row.value, '$[1]'), 0, 0, :run_at, :run_at, :now, :now, 1, :source,
       :concurrency_key, :trace_carrier, NULL, :priority, :priority_offset, :rate_key
FROM json_each(:rows) AS row;

-- name: insert_plain_runs_by_id
-- insert_plain_runs for payloads that are JSON objects or arrays: :rows is one JSON
-- object mapping each id to its payload, which json_each hands back as the very
-- text it was given (every token is copied as written), so nothing is escaped,
-- unescaped or parsed twice per run.
INSERT INTO runlane_runs (
    environment, id, task_id, queue, status, payload, attempt, failure_count,
    run_at, first_run_at, created_at, updated_at, event_sequence, source, concurrency_key,
    trace_carrier, delivery_requested_at, priority, priority_offset, rate_key
)
SELECT :environment, row.key, :task_id, :queue, :status,
       row.value, 0, 0, :run_at, :run_at, :now, :now, 1, :source,
       :concurrency_key, :trace_carrier, NULL, :priority, :priority_offset, :rate_key
FROM json_each(:rows) AS row;

-- name: name_partitioned_queue
-- A keyed run is written to this queue in the same transaction (migration 018).
INSERT OR IGNORE INTO runlane_partitioned_queues (environment, queue)
VALUES (:environment, :queue);

-- name: insert_event
INSERT INTO runlane_run_events (environment, run_id, sequence, type, occurred_at, data)
VALUES (:environment, :run_id, :sequence, :type, :occurred_at, :data);

-- name: get_run
SELECT * FROM runlane_runs WHERE environment = :environment AND id = :id;

-- name: get_active_singleton_owner
SELECT * FROM runlane_runs
WHERE environment = :environment AND task_id = :task_id AND singleton_key = :singleton_key
  AND (status = 'queued' OR status = 'scheduled' OR status = 'running'
       OR status = 'retrying' OR status = 'released' OR status = 'cancellation_requested');

-- name: list_runs
-- One page, newest first; an empty filter list filters nothing. A missing cursor
-- compares against a BLOB, which sorts after every TEXT id, so the bound stays a range
-- on the (environment, id) primary key instead of an OR the planner cannot use.
SELECT * FROM runlane_runs
WHERE environment = :environment
  AND (json_array_length(:statuses) = 0 OR status IN (SELECT value FROM json_each(:statuses)))
  AND (json_array_length(:task_ids) = 0 OR task_id IN (SELECT value FROM json_each(:task_ids)))
  AND (json_array_length(:queues) = 0 OR queue IN (SELECT value FROM json_each(:queues)))
  AND (:group_id IS NULL OR id IN (
      SELECT run_id FROM runlane_group_members
      WHERE environment = :environment AND group_id = :group_id))
  AND id < coalesce(:cursor, X'FF')
ORDER BY id DESC
LIMIT :limit;

-- name: list_run_events
-- Stored events, and the run's row (implied = 1), which implies run.created since
-- migration 009 (first_run_at set) and its latest run.started and run.succeeded since
-- 016 (started_* and succeeded_* set). A run with dependencies adds them and its
-- policy to run.created. The driver merges them by sequence (rows.run_events_from_rows).
SELECT 1 AS implied, id AS run_id, NULL AS sequence, NULL AS type,
       created_at AS occurred_at, NULL AS data, task_id, queue, first_run_at, source,
       (SELECT on_failure FROM runlane_waiting_runs
        WHERE environment = :environment AND run_id = :run_id) AS on_failure,
       (SELECT json_group_array(dependency_id) FROM (
            SELECT dependency_id FROM runlane_run_dependencies
            WHERE environment = :environment AND dependent_id = :run_id
            ORDER BY position)) AS after,
       attempt, started_sequence, started_at, started_by, started_lease_expires_at,
       succeeded_sequence, succeeded_at
FROM runlane_runs
WHERE environment = :environment AND id = :run_id
UNION ALL
SELECT 0, run_id, sequence, type, occurred_at, data, NULL, NULL, NULL, NULL, NULL, NULL,
       NULL, NULL, NULL, NULL, NULL, NULL, NULL
FROM runlane_run_events
WHERE environment = :environment AND run_id = :run_id
ORDER BY sequence;

-- name: queue_stats
-- "occupying": runs holding capacity now (an unexpired lease or dispatch reservation).
SELECT queue, concurrency_key, status, count(*) AS count,
       sum(CASE
               WHEN (status = 'running' OR status = 'cancellation_requested')
                    AND lease_expires_at > :now
                   THEN 1
               WHEN (status = 'queued' OR status = 'scheduled' OR status = 'retrying'
                     OR status = 'released')
                    AND reserved_until > :now
                   THEN 1
               ELSE 0
           END) AS occupying,
       sum(CASE
               WHEN (status = 'queued' OR status = 'scheduled' OR status = 'retrying'
                     OR status = 'released') AND run_at <= :now
                   THEN 1
               ELSE 0
           END) AS due,
       min(CASE
               WHEN (status = 'queued' OR status = 'scheduled' OR status = 'retrying'
                     OR status = 'released') AND run_at <= :now
                   THEN run_at
           END) AS oldest_due
FROM runlane_runs
WHERE environment = :environment
GROUP BY queue, concurrency_key, status;

-- name: count_finished_runs
-- Finished runs per queue and status whose last update is at or after :since.
SELECT queue, status, count(*) AS n
FROM runlane_runs
WHERE environment = :environment
  AND (status = 'succeeded' OR status = 'failed' OR status = 'cancelled'
       OR status = 'discarded')
  AND updated_at >= :since
GROUP BY queue, status;
