-- Topics: publishing messages with their deduplication entries and delivery runs.
-- Parameters are %(named)s; {schema} is the quoted schema name.

-- name: open_caller_transaction
-- A caller's connection outside autocommit opens its transaction on its first
-- statement: this one, when publishing is that first statement.
SELECT 1;

-- name: lock_delivery_keys
-- One transaction-scoped lock per (subscription, key) the publish reaches, taken in
-- the order given (sorted), before the sequence is drawn: for one key, sequence
-- order is then commit order (5.7.4). Claims take the same locks.
SELECT count(pg_advisory_xact_lock(hashtextextended(k.name, 0))) AS locked
FROM (
    SELECT name FROM unnest(%(names)s::text[]) WITH ORDINALITY AS t(name, position)
    ORDER BY position
) AS k;

-- name: get_live_deduplication_entry
-- The message a deduplication key still holds at %(now)s (none once its window ended).
SELECT m.* FROM {schema}.runlane_deduplication_keys d
JOIN {schema}.runlane_messages m ON m.environment = d.environment AND m.id = d.message_id
WHERE d.environment = %(environment)s AND d.topic = %(topic)s AND d.key = %(key)s
  AND d.expires_at > %(now)s;

-- name: get_message
SELECT * FROM {schema}.runlane_messages WHERE environment = %(environment)s AND id = %(id)s;

-- name: get_messages
SELECT * FROM {schema}.runlane_messages
WHERE environment = %(environment)s AND id = ANY(%(ids)s::text[]);

-- name: insert_message
-- Waits for a concurrent publish of the same id to end; nothing comes back if that
-- one committed (the caller then compares with it).
INSERT INTO {schema}.runlane_messages (
    environment, id, topic, payload, attributes, envelope, published_at, window_ends_at,
    trace_carrier, sequence
) VALUES (
    %(environment)s, %(id)s, %(topic)s, %(payload)s::json, %(attributes)s::jsonb, %(envelope)s,
    %(published_at)s, %(window_ends_at)s, %(trace_carrier)s::jsonb,
    nextval('{schema}.runlane_message_sequence')
)
ON CONFLICT DO NOTHING
RETURNING sequence;

-- name: delete_message
DELETE FROM {schema}.runlane_messages WHERE environment = %(environment)s AND id = %(id)s;

-- name: claim_deduplication_key
-- Take the key for this message unless it is held: a fresh key is inserted, an
-- expired entry replaced in place. A concurrent publish of the key is waited for;
-- nothing comes back when the key turns out held (the caller's message is then a
-- duplicate of the holder's).
INSERT INTO {schema}.runlane_deduplication_keys AS d (
    environment, topic, key, message_id, published_at, expires_at
) VALUES (
    %(environment)s, %(topic)s, %(key)s, %(message_id)s, %(published_at)s, %(expires_at)s
)
ON CONFLICT (environment, topic, key) DO UPDATE
SET message_id = excluded.message_id, published_at = excluded.published_at,
    expires_at = excluded.expires_at
WHERE d.expires_at <= %(now)s
RETURNING message_id;

-- name: insert_deliveries
-- One message's delivery runs (their run.created event is implied by the row, as for
-- insert_runs), each QUEUED and due now. A delivery that asks for a delivery request
-- gets one (run.delivery_requested and an outbox row) only if it is claimable at
-- once (5.7.5): keyless or NONE; EXCLUSIVE, no delivery of its key holds an unexpired
-- lease; ORDERED, no unfinished delivery of its key comes before it. The deliveries
-- travel as one JSON array of [id, task_id, queue, partition_key, mode, request, rate_key]. A
-- run id that is taken already is skipped: the caller refuses the publish.
WITH input AS (
    SELECT d.x->>0 AS id, d.x->>1 AS task_id, d.x->>2 AS queue, d.x->>3 AS partition_key,
           d.x->>4 AS subscription_mode, (d.x->>5)::bool AS request_delivery,
           d.x->>6 AS rate_key
    FROM jsonb_array_elements(%(deliveries)s::jsonb) AS d(x)
),
decided AS (
    SELECT input.*,
           input.request_delivery AND (
               input.partition_key IS NULL OR input.subscription_mode = 'none' OR NOT EXISTS (
                   SELECT 1 FROM {schema}.runlane_runs r
                   WHERE r.environment = %(environment)s AND r.task_id = input.task_id
                     AND r.partition_key = input.partition_key
                     AND r.status IN ('queued', 'scheduled', 'retrying', 'released', 'running',
                                      'cancellation_requested', 'dead_lettered')
                     AND r.message_sequence < %(sequence)s
                     AND (input.subscription_mode = 'ordered'
                          OR (r.status IN ('running', 'cancellation_requested')
                              AND r.lease_expires_at > %(now)s))
               )
           ) AS requested
    FROM input
),
inserted AS (
    INSERT INTO {schema}.runlane_runs (
        environment, id, task_id, queue, status, payload, attempt, failure_count, run_at,
        first_run_at, created_at, updated_at, event_sequence, source, trace_carrier,
        delivery_requested_at, partition_key, replays, subscription_mode, message_sequence,
        rate_key
    )
    SELECT %(environment)s, id, task_id, queue, 'queued', %(payload)s::json, 0, 0, %(now)s,
           %(now)s, %(now)s, %(now)s, CASE WHEN requested THEN 2 ELSE 1 END,
           %(source)s::jsonb, %(trace_carrier)s::jsonb,
           CASE WHEN requested THEN %(now)s::bigint END, partition_key, 0, subscription_mode,
           %(sequence)s, rate_key
    FROM decided
    ON CONFLICT DO NOTHING
    RETURNING id, queue, trace_carrier, delivery_requested_at
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
    WHERE EXISTS (SELECT 1 FROM inserted)
)
SELECT id, delivery_requested_at IS NOT NULL AS requested,
       (SELECT count(*) FROM wakeup) AS woken
FROM inserted;

-- name: publish_plain_message
-- The common publish in one autocommitted statement: one message without a
-- deduplication key whose deliveries need no key lock (NONE or keyless), so each
-- delivery that asks for a delivery request gets one. A stored id (or one being
-- written, waited for) inserts nothing and returns no row: the caller then reads
-- and compares the stored message. A taken run id fails the whole statement. The
-- deliveries are as in insert_deliveries.
WITH message AS (
    INSERT INTO {schema}.runlane_messages (
        environment, id, topic, payload, attributes, envelope, published_at, window_ends_at,
        trace_carrier, sequence
    ) VALUES (
        %(environment)s, %(id)s, %(topic)s, %(payload)s::json, %(attributes)s::jsonb,
        %(envelope)s, %(published_at)s, %(window_ends_at)s, %(trace_carrier)s::jsonb,
        nextval('{schema}.runlane_message_sequence')
    )
    ON CONFLICT DO NOTHING
    RETURNING sequence
),
input AS (
    SELECT d.x->>0 AS id, d.x->>1 AS task_id, d.x->>2 AS queue, d.x->>3 AS partition_key,
           d.x->>4 AS subscription_mode, (d.x->>5)::bool AS request_delivery,
           d.x->>6 AS rate_key
    FROM jsonb_array_elements(%(deliveries)s::jsonb) AS d(x)
),
inserted AS (
    INSERT INTO {schema}.runlane_runs (
        environment, id, task_id, queue, status, payload, attempt, failure_count, run_at,
        first_run_at, created_at, updated_at, event_sequence, source, trace_carrier,
        delivery_requested_at, partition_key, replays, subscription_mode, message_sequence,
        rate_key
    )
    SELECT %(environment)s, input.id, input.task_id, input.queue, 'queued', %(payload)s::json,
           0, 0, %(published_at)s, %(published_at)s, %(published_at)s, %(published_at)s,
           CASE WHEN input.request_delivery THEN 2 ELSE 1 END, %(source)s::jsonb,
           %(trace_carrier)s::jsonb,
           CASE WHEN input.request_delivery THEN %(published_at)s::bigint END,
           input.partition_key, 0, input.subscription_mode, message.sequence, input.rate_key
    FROM input CROSS JOIN message
    RETURNING id, queue, trace_carrier, delivery_requested_at
),
events AS (
    INSERT INTO {schema}.runlane_run_events (
        environment, run_id, sequence, type, occurred_at, data
    )
    SELECT %(environment)s, id, 2, 'run.delivery_requested', %(published_at)s,
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
           %(published_at)s, %(outbox_claimed_until)s::bigint, %(published_at)s, trace_carrier
    FROM inserted
    WHERE delivery_requested_at IS NOT NULL
),
wakeup AS (
    SELECT pg_notify(%(channel)s, %(environment)s)
    WHERE EXISTS (SELECT 1 FROM inserted)
)
SELECT message.sequence, (SELECT count(*) FROM wakeup) AS woken
FROM message;

-- name: runs_of_message
SELECT * FROM {schema}.runlane_runs
WHERE environment = %(environment)s AND message_sequence = %(sequence)s
ORDER BY id;

-- name: release_expired_deduplication_keys
DELETE FROM {schema}.runlane_deduplication_keys
WHERE environment = %(environment)s AND expires_at <= %(now)s;

-- name: publish_plain_messages
-- A group of plain messages (distinct ids) in one statement, all or nothing: a
-- stored id writes nothing and returns nothing; an id or run id taken meanwhile
-- fails it (unique violation). Rows: shapes.PUBLISH_MESSAGE and PUBLISH_DELIVERY.
-- Kept under 4 KiB so that psycopg caches its conversion. Returns one row per
-- message (run_id null) and one per delivery run.
WITH input_messages AS (
    SELECT m.x->>0 AS id, m.x->>1 AS topic, (m.x->>2)::json AS payload,
           m.x->3 AS attributes, m.x->>4 AS envelope, (m.x->>5)::bigint AS window_ends_at,
           nullif(m.x->6, 'null') AS trace_carrier, m.x->7 AS source, m.position
    FROM jsonb_array_elements(%(messages)s::jsonb) WITH ORDINALITY AS m(x, position)
),
stored AS (
    SELECT 1 FROM {schema}.runlane_messages
    WHERE environment = %(environment)s AND id IN (SELECT id FROM input_messages)
    LIMIT 1
),
message AS (
    INSERT INTO {schema}.runlane_messages (
        environment, id, topic, payload, attributes, envelope, published_at, window_ends_at,
        trace_carrier, sequence
    )
    SELECT %(environment)s, id, topic, payload, attributes, envelope, %(now)s,
           window_ends_at, trace_carrier, nextval('{schema}.runlane_message_sequence')
    FROM (SELECT * FROM input_messages ORDER BY position) AS ordered
    WHERE NOT EXISTS (SELECT 1 FROM stored)
    RETURNING id, sequence
),
input AS (
    SELECT (d.x->>0)::int AS message, d.x->>1 AS id, d.x->>2 AS task_id, d.x->>3 AS queue,
           d.x->>4 AS partition_key, d.x->>5 AS subscription_mode,
           (d.x->>6)::bool AS request_delivery, d.x->>7 AS rate_key
    FROM jsonb_array_elements(%(deliveries)s::jsonb) AS d(x)
),
inserted AS (
    INSERT INTO {schema}.runlane_runs (
        environment, id, task_id, queue, status, payload, attempt, failure_count, run_at,
        first_run_at, created_at, updated_at, event_sequence, source, trace_carrier,
        delivery_requested_at, partition_key, replays, subscription_mode, message_sequence,
        rate_key
    )
    SELECT %(environment)s, input.id, input.task_id, input.queue, 'queued', m.payload,
           0, 0, %(now)s, %(now)s, %(now)s, %(now)s,
           CASE WHEN input.request_delivery THEN 2 ELSE 1 END, m.source, m.trace_carrier,
           CASE WHEN input.request_delivery THEN %(now)s::bigint END,
           input.partition_key, 0, input.subscription_mode, message.sequence, input.rate_key
    FROM input
    JOIN input_messages m ON m.position = input.message
    JOIN message ON message.id = m.id
    RETURNING id, queue, trace_carrier, delivery_requested_at
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
    WHERE EXISTS (SELECT 1 FROM inserted)
)
SELECT id AS message_id, sequence, NULL::text AS run_id, NULL::bool AS requested,
       (SELECT count(*) FROM wakeup) AS woken
FROM message
UNION ALL
SELECT NULL, NULL, id, delivery_requested_at IS NOT NULL, 0
FROM inserted;
