-- Named queries of the PostgreSQL driver. Parameters are %(named)s (psycopg);
-- {schema} is replaced by the quoted schema name when the driver is built.
-- Batches travel as arrays (sent in binary, %(named)b, which skips quoting every
-- element) and are expanded with unnest(), so one statement text serves every
-- batch size and is prepared once per connection.

-- name: insert_runs
-- Runs (their run.created event is implied by the row: see migration 004), plus
-- run.delivery_requested and an outbox row when a transport is to wake a worker,
-- or run.started when run_now leases them, and one wakeup for listening workers
-- when a created run is due now. A run whose singleton key already has an active
-- run is skipped (ON CONFLICT DO NOTHING): only the ids actually inserted come back.
-- The runs travel as one JSON array of arrays (one parameter: far cheaper to send
-- than a dozen arrays), fields in the order below. The payload travels as a JSON
-- string holding its text, so the json column keeps it exactly as written.
WITH input AS (
    SELECT r.x->>0 AS id, r.x->>1 AS task_id, r.x->>2 AS queue, r.x->>3 AS status,
           (r.x->>4)::json AS payload, (r.x->>5)::bigint AS run_at, (r.x->>6)::int AS event_sequence,
           r.x->7 AS source, r.x->>8 AS idempotency_key, r.x->>9 AS singleton_key,
           r.x->>10 AS concurrency_key, nullif(r.x->11, 'null') AS trace_carrier,
           (r.x->>12)::bool AS request_delivery
    FROM jsonb_array_elements(%(runs)s::jsonb) AS r(x)
),
inserted AS (
    INSERT INTO {schema}.runlane_runs (
        environment, id, task_id, queue, status, payload, attempt, failure_count,
        run_at, first_run_at, created_at, updated_at, event_sequence, source, idempotency_key,
        singleton_key, concurrency_key, trace_carrier, lease_owner, lease_token,
        lease_expires_at, delivery_requested_at
    )
    SELECT %(environment)s, id, task_id, queue, status, payload, %(attempt)s, 0,
           run_at, run_at, %(now)s, %(now)s, event_sequence, source, idempotency_key,
           singleton_key, concurrency_key, trace_carrier, %(lease_owner)s::text,
           %(lease_token)s::text, %(lease_expires_at)s::bigint,
           CASE WHEN request_delivery THEN %(now)s::bigint END
    FROM input
    ON CONFLICT DO NOTHING
    RETURNING id, queue, status, run_at, event_sequence, trace_carrier, delivery_requested_at
),
events AS (
    INSERT INTO {schema}.runlane_run_events (
        environment, run_id, sequence, type, occurred_at, data
    )
    SELECT %(environment)s, id, 2, 'run.delivery_requested', %(now)s,
           jsonb_build_object('queue', queue, 'outbox_id', id || '.2')
    FROM inserted
    WHERE delivery_requested_at IS NOT NULL
    UNION ALL
    SELECT %(environment)s, id, event_sequence, 'run.started', %(now)s,
           jsonb_build_object(
               'attempt', 1, 'worker_id', %(lease_owner)s::text,
               'lease_expires_at', %(lease_expires_iso)s::text
           )
    FROM inserted
    WHERE status = 'running'
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
-- parameters, no arrays to encode.
WITH inserted AS (
    INSERT INTO {schema}.runlane_runs (
        environment, id, task_id, queue, status, payload, attempt, failure_count, run_at,
        first_run_at, created_at, updated_at, event_sequence, source, concurrency_key,
        trace_carrier
    )
    VALUES (
        %(environment)s, %(id)s, %(task_id)s, %(queue)s, %(status)s, %(payload)s::json, 0, 0,
        %(run_at)s, %(run_at)s, %(now)s, %(now)s, 1, %(source)s::jsonb, %(concurrency_key)s,
        %(trace_carrier)s::jsonb
    )
    RETURNING status, run_at
)
SELECT pg_notify(%(channel)s, %(environment)s)
FROM inserted
WHERE status = 'queued' AND run_at <= %(now)s;

-- name: copy_runs
-- The bulk path for runs without keys, delivery requests or leases: COPY is the
-- cheapest way into the table. The caller sends announce_work in the same transaction.
COPY {schema}.runlane_runs (
    environment, id, task_id, queue, status, payload, attempt, failure_count, run_at,
    first_run_at, created_at, updated_at, event_sequence, source, concurrency_key, trace_carrier
) FROM STDIN (FORMAT BINARY);

-- name: announce_work
SELECT pg_notify(%(channel)s, %(environment)s);

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

-- name: get_run
SELECT * FROM {schema}.runlane_runs WHERE environment = %(environment)s AND id = %(id)s;

-- name: get_active_singleton_owner
SELECT * FROM {schema}.runlane_runs
WHERE environment = %(environment)s AND task_id = %(task_id)s
  AND singleton_key = %(singleton_key)s
  AND status IN ('queued', 'scheduled', 'running', 'retrying', 'released', 'cancellation_requested');

-- name: due_candidates
-- Claims are composed as "WITH candidates AS (<one of the *_candidates queries>),
-- <lease_candidates>": the candidates choose which runs, lease_candidates leases
-- them and appends run.started, in one statement.
--
-- Per queue, lock the oldest due runs no other claimer holds (SKIP LOCKED), then
-- take them in turns across queues, so a worker on many queues serves them all.
SELECT due.id
FROM (
    SELECT picked.id, picked.run_at,
           row_number() OVER (PARTITION BY q.name ORDER BY picked.run_at, picked.id) AS turn
    FROM unnest(%(queues)b::text[]) AS q(name)
    CROSS JOIN LATERAL (
        SELECT r.id, r.run_at
        FROM {schema}.runlane_runs r
        WHERE r.environment = %(environment)s
          AND r.queue = q.name
          AND r.status IN ('queued', 'scheduled', 'retrying', 'released')
          AND r.run_at <= %(now)s
        ORDER BY r.run_at, r.id
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED
    ) AS picked
) AS due
ORDER BY due.turn, due.run_at, due.id
LIMIT %(limit)s

-- name: bounded_candidates
-- Bounded queues, whose capacity locks the caller holds: per (queue, concurrency
-- key) partition, at most the limit minus the runs holding an unexpired lease.
WITH limits AS (
    SELECT * FROM unnest(%(queues)b::text[], %(limits)b::int[]) AS q(name, lim)
),
occupied AS (
    SELECT r.queue, coalesce(r.concurrency_key, '') AS part, count(*) AS n
    FROM {schema}.runlane_runs r
    JOIN limits ON limits.name = r.queue
    WHERE r.environment = %(environment)s
      AND r.status IN ('running', 'cancellation_requested')
      AND r.lease_expires_at > %(now)s
    GROUP BY r.queue, coalesce(r.concurrency_key, '')
),
ranked AS (
    SELECT r.id, r.queue, r.run_at, coalesce(r.concurrency_key, '') AS part, limits.lim,
           row_number() OVER (
               PARTITION BY r.queue, coalesce(r.concurrency_key, '') ORDER BY r.run_at, r.id
           ) AS rn
    FROM {schema}.runlane_runs r
    JOIN limits ON limits.name = r.queue
    WHERE r.environment = %(environment)s
      AND r.status IN ('queued', 'scheduled', 'retrying', 'released')
      AND r.run_at <= %(now)s
)
SELECT r.id
FROM {schema}.runlane_runs r
WHERE r.environment = %(environment)s
  AND r.id = ANY(ARRAY(
      SELECT ranked.id
      FROM ranked
      LEFT JOIN occupied ON occupied.queue = ranked.queue AND occupied.part = ranked.part
      WHERE ranked.rn <= ranked.lim - coalesce(occupied.n, 0)
      ORDER BY ranked.run_at, ranked.id
      LIMIT %(limit)s
  ))
  AND r.status IN ('queued', 'scheduled', 'retrying', 'released')
  AND r.run_at <= %(now)s
FOR UPDATE OF r

-- name: run_candidate
SELECT r.id
FROM {schema}.runlane_runs r
WHERE r.environment = %(environment)s AND r.id = %(id)s
  AND r.status IN ('queued', 'scheduled', 'retrying', 'released')
  AND r.run_at <= %(now)s
FOR UPDATE

-- name: lease_candidates
-- Not a statement on its own: the tail of every claim (see above). Candidates are
-- locked rows checked as they are now; they are found by primary key (= ANY), so
-- the plan never depends on how stale the table's statistics are.
claimed AS (
    UPDATE {schema}.runlane_runs r
    SET status = 'running',
        attempt = r.attempt + 1,
        event_sequence = r.event_sequence + 1,
        lease_owner = %(worker_id)s,
        lease_token = %(lease_token)s,
        lease_expires_at = %(lease_expires_at)s,
        reserved_until = NULL,
        updated_at = %(now)s
    WHERE r.environment = %(environment)s AND r.id = ANY(ARRAY(SELECT id FROM candidates))
    RETURNING r.*
),
started AS (
    INSERT INTO {schema}.runlane_run_events (
        environment, run_id, sequence, type, occurred_at, data
    )
    SELECT environment, id, event_sequence, 'run.started', %(now)s,
           jsonb_build_object(
               'attempt', attempt, 'worker_id', lease_owner,
               'lease_expires_at', %(lease_expires_iso)s::text
           )
    FROM claimed
)
SELECT * FROM claimed

-- name: lock_capacity
-- Serialise capacity decisions on bounded queues until the transaction ends, in
-- the (sorted) order given. Without waiting, queues another process is deciding on
-- (or without due runs) are skipped. The queues locked come back.
SELECT q.name
FROM unnest(%(queues)b::text[]) AS q(name)
WHERE CASE
    WHEN NOT %(wait)s THEN
        EXISTS (
            SELECT 1 FROM {schema}.runlane_runs r
            WHERE r.environment = %(environment)s AND r.queue = q.name
              AND r.status IN ('queued', 'scheduled', 'retrying', 'released')
              AND r.run_at <= %(now)s
        )
        AND pg_try_advisory_xact_lock(hashtextextended(%(lock_prefix)s || q.name, 0))
    ELSE pg_advisory_xact_lock(hashtextextended(%(lock_prefix)s || q.name, 0)) IS NOT NULL
END

-- name: occupied_capacity
SELECT count(*) AS n FROM {schema}.runlane_runs
WHERE environment = %(environment)s AND queue = %(queue)s
  AND coalesce(concurrency_key, '') = coalesce(%(concurrency_key)s::text, '')
  AND status IN ('running', 'cancellation_requested')
  AND lease_expires_at > %(now)s;

-- name: heartbeat
UPDATE {schema}.runlane_runs
SET lease_expires_at = %(lease_expires_at)s
WHERE environment = %(environment)s AND id = %(id)s AND lease_token = %(lease_token)s
  AND status IN ('running', 'cancellation_requested')
  AND lease_expires_at > %(now)s
RETURNING status;

-- name: apply_transitions
-- Compare-and-set many runs at once: each row applies only while the run's
-- event_sequence is the expected one (and, when given, it still holds the lease,
-- or the lease has expired by then). Events are appended for the rows applied.
-- A batch never names one run twice; the driver splits such calls into rounds.
-- The transitions and their events travel as two JSON arrays of arrays (one
-- parameter each: cheaper to send than a dozen arrays); ids also come as an
-- array so the runs are found by primary key whatever the statistics say.
WITH input AS (
    SELECT t.x->>0 AS id, t.x->>1 AS status, (t.x->>2)::bigint AS run_at,
           nullif(t.x->3, 'null') AS result, nullif(t.x->4, 'null') AS failure,
           t.x->>5 AS cancel_reason, (t.x->>6)::int AS add_failure,
           (t.x->>7)::int AS event_count, (t.x->>8)::bool AS keep_lease,
           (t.x->>9)::int AS expected_sequence, t.x->>10 AS lease_token,
           (t.x->>11)::bigint AS lease_expired_by
    FROM jsonb_array_elements(%(transitions)s::jsonb) AS t(x)
),
updated AS (
    UPDATE {schema}.runlane_runs r
    SET status = input.status,
        run_at = COALESCE(input.run_at, r.run_at),
        result = input.result,
        failure = input.failure,
        cancel_reason = input.cancel_reason,
        failure_count = r.failure_count + input.add_failure,
        event_sequence = r.event_sequence + input.event_count,
        updated_at = %(now)s,
        delivery_requested_at = NULL,
        lease_owner = CASE WHEN input.keep_lease THEN r.lease_owner END,
        lease_token = CASE WHEN input.keep_lease THEN r.lease_token END,
        lease_expires_at = CASE WHEN input.keep_lease THEN r.lease_expires_at END
    FROM input
    WHERE r.environment = %(environment)s AND r.id = input.id
      AND r.id = ANY(%(ids)b::text[])
      AND r.event_sequence = input.expected_sequence
      AND (input.lease_token IS NULL OR r.lease_token = input.lease_token)
      AND (input.lease_expired_by IS NULL OR r.lease_expires_at <= input.lease_expired_by)
    RETURNING r.id
),
events AS (
    INSERT INTO {schema}.runlane_run_events (
        environment, run_id, sequence, type, occurred_at, data
    )
    SELECT %(environment)s, e.x->>0, (e.x->>1)::int, e.x->>2, %(now)s, e.x->3
    FROM jsonb_array_elements(%(events)s::jsonb) AS e(x)
    JOIN updated ON updated.id = e.x->>0
)
SELECT id FROM updated;

-- name: list_runs
SELECT * FROM {schema}.runlane_runs
WHERE environment = %(environment)s
  AND (cardinality(%(statuses)b::text[]) = 0 OR status = ANY(%(statuses)b::text[]))
  AND (cardinality(%(task_ids)b::text[]) = 0 OR task_id = ANY(%(task_ids)b::text[]))
  AND (cardinality(%(queues)b::text[]) = 0 OR queue = ANY(%(queues)b::text[]))
  AND (%(cursor)s::text IS NULL OR id < %(cursor)s::text)
ORDER BY id DESC
LIMIT %(limit)s;

-- name: list_run_events
-- Stored events, and the run.created event a row created since migration 004 implies.
SELECT id AS run_id, 1 AS sequence, 'run.created' AS type, created_at AS occurred_at,
       NULL::jsonb AS data, task_id, queue, first_run_at, source
FROM {schema}.runlane_runs
WHERE environment = %(environment)s AND id = %(run_id)s AND first_run_at IS NOT NULL
UNION ALL
SELECT run_id, sequence, type, occurred_at, data, NULL, NULL, NULL, NULL
FROM {schema}.runlane_run_events
WHERE environment = %(environment)s AND run_id = %(run_id)s
ORDER BY sequence;

-- name: list_expired_leases
SELECT * FROM {schema}.runlane_runs
WHERE environment = %(environment)s
  AND status IN ('running', 'cancellation_requested')
  AND lease_expires_at <= %(now)s
ORDER BY lease_expires_at
LIMIT %(limit)s;

-- name: release_expired_idempotency_keys
-- Pick stale ownership first, then delete only rows still naming the same run: a
-- trigger that took the key over meanwhile keeps it.
WITH stale AS (
    SELECT k.task_id, k.key, k.run_id
    FROM {schema}.runlane_idempotency_keys k
    LEFT JOIN {schema}.runlane_runs r ON r.environment = k.environment AND r.id = k.run_id
    WHERE k.environment = %(environment)s
      AND (r.id IS NULL
           OR (r.status IN ('succeeded', 'failed', 'cancelled')
               AND (r.status = 'failed' OR k.expires_at IS NULL OR k.expires_at <= %(now)s)))
)
DELETE FROM {schema}.runlane_idempotency_keys k
USING stale
WHERE k.environment = %(environment)s AND k.task_id = stale.task_id
  AND k.key = stale.key AND k.run_id = stale.run_id;

-- name: reset_idempotency_key
DELETE FROM {schema}.runlane_idempotency_keys
WHERE environment = %(environment)s AND task_id = %(task_id)s AND key = %(key)s;

-- name: prune_runs
-- One bounded batch: the runs, their history, ownership, outbox and schedule
-- occurrence rows together.
WITH doomed AS (
    SELECT id FROM {schema}.runlane_runs
    WHERE environment = %(environment)s
      AND status IN ('succeeded', 'failed', 'cancelled')
      AND status = ANY(%(statuses)b::text[])
      AND updated_at < %(older_than)s
    ORDER BY updated_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
),
pruned AS (
    DELETE FROM {schema}.runlane_runs r
    WHERE r.environment = %(environment)s AND r.id = ANY(ARRAY(SELECT id FROM doomed))
    RETURNING r.id
),
history AS (
    DELETE FROM {schema}.runlane_run_events e
    WHERE e.environment = %(environment)s AND e.run_id = ANY(ARRAY(SELECT id FROM pruned))
),
ownership AS (
    DELETE FROM {schema}.runlane_idempotency_keys k
    WHERE k.environment = %(environment)s AND k.run_id = ANY(ARRAY(SELECT id FROM pruned))
),
outbox AS (
    DELETE FROM {schema}.runlane_outbox o
    WHERE o.environment = %(environment)s AND o.run_id = ANY(ARRAY(SELECT id FROM pruned))
),
-- A pruned run's slot lies long before its schedule's last_slot, so no tick
-- proposes it again: its occurrence row has done its job.
occurrences AS (
    DELETE FROM {schema}.runlane_schedule_occurrences s
    WHERE s.environment = %(environment)s AND s.run_id = ANY(ARRAY(SELECT id FROM pruned))
)
SELECT count(*) AS pruned FROM pruned;

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
  AND status IN ('succeeded', 'failed', 'cancelled')
  AND updated_at >= %(since)s
GROUP BY queue, status;

-- name: undelivered_runs
-- Due runs without a delivery request, locked so concurrent ticks request each once.
SELECT id, queue, concurrency_key
FROM {schema}.runlane_runs
WHERE environment = %(environment)s
  AND queue = ANY(%(queues)b::text[])
  AND delivery_requested_at IS NULL
  AND status IN ('queued', 'scheduled', 'retrying', 'released')
  AND run_at <= %(now)s
ORDER BY run_at, id
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;

-- name: occupied_by_partition
-- Capacity held per partition of bounded queues: unexpired leases and reservations.
SELECT queue, coalesce(concurrency_key, '') AS part, count(*) AS n
FROM {schema}.runlane_runs
WHERE environment = %(environment)s
  AND queue = ANY(%(queues)b::text[])
  AND ((status IN ('running', 'cancellation_requested') AND lease_expires_at > %(now)s)
       OR (status IN ('queued', 'scheduled', 'retrying', 'released')
           AND reserved_until > %(now)s))
GROUP BY queue, coalesce(concurrency_key, '');

-- name: request_deliveries
-- Mark runs delivery-requested (bounded ones with a reservation), append
-- run.delivery_requested and one outbox row each.
WITH input AS (
    SELECT * FROM unnest(%(ids)b::text[], %(reserved_untils)b::bigint[]) AS t(id, reserved_until)
),
marked AS (
    UPDATE {schema}.runlane_runs r
    SET delivery_requested_at = %(now)s,
        reserved_until = input.reserved_until,
        event_sequence = r.event_sequence + 1
    FROM input
    WHERE r.environment = %(environment)s AND r.id = input.id
      AND r.id = ANY(%(ids)b::text[])
      AND r.delivery_requested_at IS NULL
      AND r.status IN ('queued', 'scheduled', 'retrying', 'released')
    RETURNING r.id, r.queue, r.event_sequence, r.trace_carrier
),
events AS (
    INSERT INTO {schema}.runlane_run_events (
        environment, run_id, sequence, type, occurred_at, data
    )
    SELECT %(environment)s, id, event_sequence, 'run.delivery_requested', %(now)s,
           jsonb_build_object('queue', queue, 'outbox_id', id || '.' || event_sequence)
    FROM marked
),
outbox AS (
    INSERT INTO {schema}.runlane_outbox (
        environment, id, run_id, queue, status, available_at, requested_at, trace_carrier
    )
    SELECT %(environment)s, id || '.' || event_sequence, id, queue, 'pending', %(now)s,
           %(now)s, trace_carrier
    FROM marked
)
SELECT count(*) AS requested FROM marked;

-- name: expire_dispatch_reservations
UPDATE {schema}.runlane_runs
SET reserved_until = NULL, delivery_requested_at = NULL
WHERE environment = %(environment)s
  AND reserved_until IS NOT NULL AND reserved_until <= %(now)s
  AND status IN ('queued', 'scheduled', 'retrying', 'released');

-- name: claim_outbox
WITH due AS (
    SELECT id FROM {schema}.runlane_outbox
    WHERE environment = %(environment)s
      AND ((status IN ('pending', 'failed') AND available_at <= %(now)s)
           OR (status = 'claimed' AND claimed_until <= %(now)s))
    ORDER BY available_at, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE {schema}.runlane_outbox o
SET status = 'claimed', claimed_until = %(claimed_until)s
WHERE o.environment = %(environment)s AND o.id = ANY(ARRAY(SELECT id FROM due))
RETURNING o.*;

-- name: settle_outbox
WITH input AS (
    SELECT *
    FROM unnest(
        %(ids)b::text[], %(published)b::bool[], %(provider_message_ids)b::text[],
        %(retry_ats)b::bigint[], %(errors)b::text[]
    ) AS t(id, published, provider_message_id, retry_at, error)
)
UPDATE {schema}.runlane_outbox o
SET status = CASE WHEN input.published THEN 'published' ELSE 'failed' END,
    published_at = CASE WHEN input.published THEN %(now)s::bigint END,
    provider_message_id = CASE WHEN input.published THEN input.provider_message_id END,
    available_at = CASE WHEN input.published THEN o.available_at ELSE input.retry_at END,
    last_error = CASE WHEN input.published THEN o.last_error ELSE input.error::jsonb END,
    attempts = o.attempts + 1,
    claimed_until = NULL
FROM input
WHERE o.environment = %(environment)s AND o.id = input.id AND o.id = ANY(%(ids)b::text[])
  AND o.status = 'claimed';

-- name: outbox_counts
SELECT status, count(*) AS n FROM {schema}.runlane_outbox
WHERE environment = %(environment)s
GROUP BY status;

-- name: outbox_backlog
-- Delivery requests not yet published (pending, claimed by a publisher, or failed and waiting).
SELECT queue, count(*) AS n FROM {schema}.runlane_outbox
WHERE environment = %(environment)s AND status IN ('pending', 'claimed', 'failed')
GROUP BY queue;

-- name: get_schedule_states
SELECT schedule_id, last_slot, paused, first_seen FROM {schema}.runlane_schedules
WHERE environment = %(environment)s;

-- name: mark_schedule_seen
-- Concurrent first ticks: the earliest first-seen point stays.
INSERT INTO {schema}.runlane_schedules AS s
    (environment, schedule_id, last_slot, paused, updated_at, first_seen)
VALUES (%(environment)s, %(schedule_id)s, NULL, false, %(now)s, %(now)s)
ON CONFLICT (environment, schedule_id) DO UPDATE
    SET first_seen = least(s.first_seen, excluded.first_seen),
        updated_at = excluded.updated_at;

-- name: set_schedule_paused
INSERT INTO {schema}.runlane_schedules AS s (environment, schedule_id, last_slot, paused, updated_at)
VALUES (%(environment)s, %(schedule_id)s, NULL, %(paused)s, %(now)s)
ON CONFLICT (environment, schedule_id) DO UPDATE
    SET paused = excluded.paused, updated_at = excluded.updated_at;

-- name: claim_schedule_occurrence
-- The occurrence id is (schedule, slot): a concurrent tick claiming the same slot
-- waits for this one and then claims nothing.
INSERT INTO {schema}.runlane_schedule_occurrences (
    environment, schedule_id, slot, run_id, created_at
)
VALUES (%(environment)s, %(schedule_id)s, %(slot)s, %(run_id)s, %(now)s)
ON CONFLICT DO NOTHING
RETURNING run_id;

-- name: advance_schedule
INSERT INTO {schema}.runlane_schedules AS s (environment, schedule_id, last_slot, paused, updated_at)
VALUES (%(environment)s, %(schedule_id)s, %(slot)s, false, %(now)s)
ON CONFLICT (environment, schedule_id) DO UPDATE
    SET last_slot = greatest(s.last_slot, excluded.last_slot),
        updated_at = excluded.updated_at;

-- name: lock_migrations
-- Serialises migrate() across processes until its transaction ends.
SELECT pg_advisory_xact_lock(hashtext(%(lock_name)s));

-- name: create_schema
CREATE SCHEMA IF NOT EXISTS {schema};

-- name: create_migrations_table
CREATE TABLE IF NOT EXISTS {schema}.runlane_migrations (
    version    INTEGER PRIMARY KEY,
    name       TEXT    NOT NULL,
    applied_at BIGINT  NOT NULL
);

-- name: applied_migrations
SELECT version FROM {schema}.runlane_migrations ORDER BY version;

-- name: record_migration
INSERT INTO {schema}.runlane_migrations (version, name, applied_at)
VALUES (%(version)s, %(name)s, %(applied_at)s);

-- name: schema_version
SELECT coalesce(max(version), 0) AS version FROM {schema}.runlane_migrations;
