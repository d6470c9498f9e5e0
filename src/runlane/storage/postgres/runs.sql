-- Runs and their events: creating, reading, listing, counting. Parameters are
-- %(named)s (psycopg); {schema} is replaced by the quoted schema name when the
-- driver is built. (The same holds in every .sql file of this driver.)
-- Batches travel as arrays (sent in binary, %(named)b, which skips quoting every
-- element) and are expanded with unnest(), so one statement text serves every
-- batch size and is prepared once per connection.

-- name: insert_runs
-- Runs (their run.created event is implied by the row: see migration 004, and so is
-- run.started when run_now leases them: 017), plus run.delivery_requested and an
-- outbox row when a transport is to wake a worker, and one wakeup for listening
-- workers when a created run is due now. A run whose singleton key already has an active
-- run is skipped (ON CONFLICT on runlane_runs_singleton): only the ids actually
-- inserted come back. An id that exists fails the whole statement (nothing of the
-- batch is kept), as any other unique row would.
-- The runs travel as one JSON array of arrays (one parameter: far cheaper to send
-- than a dozen arrays), fields in the order below, as shapes.INSERT_RUN declares
-- them. The payload travels as a JSON string holding its text, so the json column
-- keeps it exactly as written.
WITH input AS (
    SELECT r.x->>0 AS id, r.x->>1 AS task_id, r.x->>2 AS queue, r.x->>3 AS status,
           (r.x->>4)::json AS payload, (r.x->>5)::bigint AS run_at, (r.x->>6)::int AS event_sequence,
           r.x->7 AS source, r.x->>8 AS idempotency_key, r.x->>9 AS singleton_key,
           r.x->>10 AS concurrency_key, nullif(r.x->11, 'null') AS trace_carrier,
           (r.x->>12)::bool AS request_delivery, (r.x->>13)::int AS priority,
           (r.x->>14)::bigint AS priority_offset, r.x->>15 AS rate_key
    FROM jsonb_array_elements(%(runs)s::jsonb) AS r(x)
),
inserted AS (
    INSERT INTO {schema}.runlane_runs (
        environment, id, task_id, queue, status, payload, attempt, failure_count,
        run_at, first_run_at, created_at, updated_at, event_sequence, source, idempotency_key,
        singleton_key, concurrency_key, trace_carrier, lease_owner, lease_token,
        lease_expires_at, delivery_requested_at, priority, priority_offset, started_sequence,
        started_at, started_by, started_lease_expires_at, rate_key
    )
    SELECT %(environment)s, id, task_id, queue, status, payload, %(attempt)s, 0,
           run_at, run_at, %(now)s, %(now)s, event_sequence, source, idempotency_key,
           singleton_key, concurrency_key, trace_carrier, %(lease_owner)s::text,
           %(lease_token)s::text, %(lease_expires_at)s::bigint,
           CASE WHEN request_delivery THEN %(now)s::bigint END, priority, priority_offset,
           CASE WHEN status = 'running' THEN event_sequence END,
           CASE WHEN status = 'running' THEN %(now)s::bigint END,
           CASE WHEN status = 'running' THEN %(lease_owner)s::text END,
           CASE WHEN status = 'running' THEN %(lease_expires_at)s::bigint END, rate_key
    FROM input
    ON CONFLICT (environment, task_id, singleton_key)
        WHERE singleton_key IS NOT NULL AND status IN (
            'queued', 'scheduled', 'running', 'retrying', 'released', 'cancellation_requested')
        DO NOTHING
    RETURNING id, queue, status, run_at, event_sequence, trace_carrier, delivery_requested_at,
              concurrency_key
),
partitioned AS (
    -- A queue's first run with a concurrency key makes its bounded claims rank per
    -- partition (migration 023). Runs with keys are written by this statement, or by
    -- copy_runs followed by name_partitioned_queues.
    INSERT INTO {schema}.runlane_partitioned_queues (environment, queue)
    SELECT DISTINCT %(environment)s, queue FROM inserted WHERE concurrency_key IS NOT NULL
    ON CONFLICT DO NOTHING
),
events AS (
    INSERT INTO {schema}.runlane_run_events (
        environment, run_id, sequence, type, occurred_at, data
    )
    SELECT %(environment)s, id, 2, 'run.delivery_requested', %(now)s,
           jsonb_build_object('queue', queue, 'outbox_id', id || '.2')
    FROM inserted
    WHERE delivery_requested_at IS NOT NULL
),
outbox AS (
    INSERT INTO {schema}.runlane_outbox (
        environment, id, run_id, queue, status, available_at, claimed_until, requested_at,
        trace_carrier
    )
    SELECT %(environment)s, id || '.2', id, queue,
           CASE WHEN %(outbox_claimed_until)s::bigint IS NULL THEN 'pending' ELSE 'claimed' END,
           %(now)s, %(outbox_claimed_until)s::bigint, %(now)s, trace_carrier
    FROM inserted
    WHERE delivery_requested_at IS NOT NULL
),
wakeup AS (
    SELECT pg_notify(%(channel)s, %(environment)s)
    WHERE EXISTS (SELECT 1 FROM inserted WHERE status = 'queued' AND run_at <= %(now)s)
)
SELECT id, (SELECT count(*) FROM wakeup) AS woken FROM inserted;

-- name: insert_run
-- One run without keys, delivery request or lease (a lone trigger): scalar
-- parameters, no arrays to encode. insert_run_handoff below is the same with a
-- hand-off to a worker standing by; this one is cheaper (no standby table to read,
-- no event rows to prepare), for when nobody stood by a moment ago.
WITH inserted AS (
    INSERT INTO {schema}.runlane_runs (
        environment, id, task_id, queue, status, payload, attempt, failure_count, run_at,
        first_run_at, created_at, updated_at, event_sequence, source, concurrency_key,
        trace_carrier, priority, priority_offset
    )
    VALUES (
        %(environment)s, %(id)s, %(task_id)s, %(queue)s, %(status)s, %(payload)s::json, 0, 0,
        %(run_at)s, %(run_at)s, %(now)s, %(now)s, 1, %(source)s::jsonb, %(concurrency_key)s,
        %(trace_carrier)s::jsonb, %(priority)s::int, %(priority_offset)s::bigint
    )
    RETURNING status, run_at
)
SELECT pg_notify(%(channel)s, %(environment)s)
FROM inserted
WHERE status = 'queued' AND run_at <= %(now)s;

-- name: insert_run_handoff
-- insert_run for a run due now without a concurrency key: when a live worker stands
-- by on its queue (migration 011; only queues without a concurrency limit are
-- offered), the run takes one of that worker's slots: it is written already leased to the
-- worker (its row implying run.started), and the worker hears of it, row and all,
-- on its listener's channel; otherwise the environment's listeners are woken as before.
-- The statement returns one row when it notified, with the lease when it handed off.
WITH slot AS (
    UPDATE {schema}.runlane_standby s
    SET free = s.free - 1, handed = array_append(s.handed, %(id)s::text)
    WHERE s.environment = %(environment)s AND s.lease_token = (
        SELECT c.lease_token
        FROM {schema}.runlane_standby c
        WHERE c.environment = %(environment)s AND c.free > 0
          AND %(queue)s::text = ANY(c.queues)
          -- Its listening connection holds the lock (shared would be granted otherwise).
          AND NOT pg_try_advisory_xact_lock_shared(c.lock_key)
        LIMIT 1
        FOR UPDATE SKIP LOCKED
    )
    RETURNING s.worker_id, s.lease_token, %(now)s::bigint + s.lease_micros AS lease_expires_at,
              s.channel
),
inserted AS (
    INSERT INTO {schema}.runlane_runs (
        environment, id, task_id, queue, status, payload, attempt, failure_count, run_at,
        first_run_at, created_at, updated_at, event_sequence, source, concurrency_key,
        trace_carrier, lease_owner, lease_token, lease_expires_at, priority, priority_offset,
        started_sequence, started_at, started_by, started_lease_expires_at
    )
    SELECT %(environment)s, %(id)s, %(task_id)s, %(queue)s,
           CASE WHEN slot.worker_id IS NULL THEN %(status)s ELSE 'running' END,
           %(payload)s::json, (slot.worker_id IS NOT NULL)::int, 0,
           %(run_at)s, %(run_at)s, %(now)s, %(now)s,
           CASE WHEN slot.worker_id IS NULL THEN 1 ELSE 2 END,
           %(source)s::jsonb, %(concurrency_key)s, %(trace_carrier)s::jsonb,
           slot.worker_id, slot.lease_token, slot.lease_expires_at, %(priority)s::int,
           %(priority_offset)s::bigint,
           CASE WHEN slot.worker_id IS NOT NULL THEN 2 END,
           CASE WHEN slot.worker_id IS NOT NULL THEN %(now)s::bigint END,
           slot.worker_id, slot.lease_expires_at
    FROM (VALUES (1)) AS one (x) LEFT JOIN slot ON true
    RETURNING *
),
handed AS (
    -- The row in rows.RUN_COLUMNS order, JSON columns as their text.
    SELECT json_build_array(
               i.id, i.environment, i.task_id, i.queue, i.status, i.payload::text, i.attempt,
               i.failure_count, i.run_at, i.created_at, i.updated_at, i.event_sequence,
               i.source::text, i.result::text, i.failure::text, i.idempotency_key,
               i.singleton_key, i.concurrency_key, i.trace_carrier::text, i.lease_owner,
               i.lease_token, i.lease_expires_at, i.cancel_reason, i.partition_key, i.replays,
               i.subscription_mode, i.message_sequence, i.dead_letter_reason,
               i.dead_lettered_at, i.rate_key, i.priority
           )::text AS row_text
    FROM inserted i
    WHERE i.lease_owner IS NOT NULL
)
-- Not handed off: wake the environment's listeners (the run is due: the driver sends
-- this statement only for runs due now).
SELECT pg_notify(%(channel)s, %(environment)s), NULL::text, NULL::text, NULL::bigint
FROM inserted
WHERE lease_owner IS NULL
UNION ALL
-- A notification holds at most 8,000 bytes: a larger run goes by its id alone, and
-- the worker reads it.
SELECT pg_notify(
           slot.channel,
           json_build_array(slot.lease_token, %(id)s::text)::text
           || CASE WHEN octet_length(handed.row_text) > 7000 THEN ''
                   ELSE E'\n' || handed.row_text END
       ),
       slot.worker_id, slot.lease_token, slot.lease_expires_at
FROM slot CROSS JOIN handed;

-- name: copy_runs
-- The bulk path for runs without keys, delivery requests or leases: COPY is the
-- cheapest way into the table. Text format, one line per run (params.copy_text);
-- the server parses the JSON columns as it parses parameters. The caller sends
-- announce_work in the same transaction.
COPY {schema}.runlane_runs (
    environment, id, task_id, queue, status, payload, attempt, failure_count, run_at,
    first_run_at, created_at, updated_at, event_sequence, source, concurrency_key, trace_carrier,
    priority, priority_offset, rate_key
) FROM STDIN;

-- name: name_partitioned_queues
-- copy_runs wrote runs with a concurrency key to these queues (see insert_runs).
INSERT INTO {schema}.runlane_partitioned_queues (environment, queue)
SELECT %(environment)s, unnest(%(queues)s::text[])
ON CONFLICT DO NOTHING;

-- name: announce_work
SELECT pg_notify(%(channel)s, %(environment)s);

-- name: get_run
SELECT * FROM {schema}.runlane_runs WHERE environment = %(environment)s AND id = %(id)s;

-- name: get_active_singleton_owner
SELECT * FROM {schema}.runlane_runs
WHERE environment = %(environment)s AND task_id = %(task_id)s
  AND singleton_key = %(singleton_key)s
  AND status IN ('queued', 'scheduled', 'running', 'retrying', 'released', 'cancellation_requested');

-- name: list_runs
-- One page, newest first; an empty filter array filters nothing.
SELECT * FROM {schema}.runlane_runs
WHERE environment = %(environment)s
  AND (cardinality(%(statuses)b::text[]) = 0 OR status = ANY(%(statuses)b::text[]))
  AND (cardinality(%(task_ids)b::text[]) = 0 OR task_id = ANY(%(task_ids)b::text[]))
  AND (cardinality(%(queues)b::text[]) = 0 OR queue = ANY(%(queues)b::text[]))
  AND (%(group_id)s::text IS NULL OR id IN (
      SELECT run_id FROM {schema}.runlane_group_members
      WHERE group_id = %(group_id)s::text AND environment = %(environment)s))
  AND (%(cursor)s::text IS NULL OR id < %(cursor)s::text)
ORDER BY id DESC
LIMIT %(limit)s;

-- name: list_run_events
-- Stored events, and the run's row (implied), which implies run.created since
-- migration 004 (first_run_at set) and its latest run.started and run.succeeded since
-- 017 (started_* and succeeded_* set). A run with dependencies adds them and its
-- policy to run.created. The driver merges them by sequence (rows.run_events_from_rows).
SELECT true AS implied, id AS run_id, NULL::int AS sequence, NULL::text AS type,
       created_at AS occurred_at, NULL::jsonb AS data, task_id, queue, first_run_at, source,
       (SELECT on_failure FROM {schema}.runlane_waiting_runs
        WHERE run_id = %(run_id)s AND environment = %(environment)s) AS on_failure,
       (SELECT jsonb_agg(dependency_id ORDER BY position)
        FROM {schema}.runlane_run_dependencies
        WHERE dependent_id = %(run_id)s AND environment = %(environment)s) AS after,
       attempt, started_sequence, started_at, started_by, started_lease_expires_at,
       succeeded_sequence, succeeded_at
FROM {schema}.runlane_runs
WHERE environment = %(environment)s AND id = %(run_id)s
UNION ALL
SELECT false, run_id, sequence, type, occurred_at, data, NULL, NULL, NULL, NULL, NULL,
       NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
FROM {schema}.runlane_run_events
WHERE environment = %(environment)s AND run_id = %(run_id)s
ORDER BY sequence;

-- name: queue_stats
-- "occupying": runs holding capacity now (an unexpired lease or dispatch reservation).
SELECT queue, concurrency_key, status, count(*) AS count,
       count(*) FILTER (
           WHERE (status IN ('running', 'cancellation_requested') AND lease_expires_at > %(now)s)
              OR (status IN ('queued', 'scheduled', 'retrying', 'released')
                  AND reserved_until > %(now)s)
       ) AS occupying,
       count(*) FILTER (
           WHERE status IN ('queued', 'scheduled', 'retrying', 'released') AND run_at <= %(now)s
       ) AS due,
       min(run_at) FILTER (
           WHERE status IN ('queued', 'scheduled', 'retrying', 'released') AND run_at <= %(now)s
       ) AS oldest_due
FROM {schema}.runlane_runs
WHERE environment = %(environment)s
GROUP BY queue, concurrency_key, status;

-- name: count_finished_runs
-- Finished runs per queue and status whose last update is at or after %(since)s.
SELECT queue, status, count(*) AS n
FROM {schema}.runlane_runs
WHERE environment = %(environment)s
  AND status IN ('succeeded', 'failed', 'cancelled', 'discarded')
  AND updated_at >= %(since)s
GROUP BY queue, status;
