-- Delivery requests, bounded-queue reservations and the outbox.
-- Parameters are %(named)s; {schema} is the quoted schema name.

-- name: undelivered_runs
-- Due runs without a delivery request, locked so concurrent ticks request each once.
-- A delivery with a partition key is requested only when claimable (contract 5.7.5,
-- the rule of claim_run), at most one per key, and not while another delivery of its
-- key still waits on a request. OF r: the lock covers the chosen runs only, never
-- the key's other deliveries the rule reads. Task runs have no key: the keyed part
-- finds nothing for them.
WITH plain AS (
    SELECT r.id, r.queue, r.concurrency_key, r.run_at
    FROM {schema}.runlane_runs r
    WHERE r.environment = %(environment)s
      AND r.queue = ANY(%(queues)b::text[])
      AND r.delivery_requested_at IS NULL
      AND r.status IN ('queued', 'scheduled', 'retrying', 'released')
      AND r.run_at <= %(now)s
      AND r.partition_key IS NULL
    ORDER BY r.run_at, r.id
    LIMIT %(limit)s
    FOR UPDATE OF r SKIP LOCKED
),
keyed AS (
    SELECT r.id, r.queue, r.concurrency_key, r.run_at
    FROM {schema}.runlane_runs r
    WHERE r.environment = %(environment)s
      AND r.id = ANY(ARRAY(
          SELECT first_of_key.id
          FROM (
              SELECT k.id, k.run_at, k.task_id, k.partition_key,
                     row_number() OVER (
                         PARTITION BY k.task_id, k.partition_key ORDER BY k.run_at, k.id
                     ) AS rank_in_key
              FROM (
                  -- Every unfinished delivery of every key, with the sequence of its
                  -- key's head: one ordered pass over runlane_runs_keyed.
                  SELECT u.id, u.task_id, u.partition_key, u.queue, u.status, u.run_at,
                         u.delivery_requested_at, u.subscription_mode, u.message_sequence,
                         min(u.message_sequence) OVER (
                             PARTITION BY u.task_id, u.partition_key
                         ) AS head_sequence
                  FROM {schema}.runlane_runs u
                  WHERE u.environment = %(environment)s
                    AND u.partition_key IS NOT NULL
                    AND u.status IN ('queued', 'scheduled', 'retrying', 'released', 'running',
                                     'cancellation_requested', 'dead_lettered')
              ) AS k
              WHERE k.queue = ANY(%(queues)b::text[])
                AND k.delivery_requested_at IS NULL
                AND k.status IN ('queued', 'scheduled', 'retrying', 'released')
                AND k.run_at <= %(now)s
                -- ORDERED: the key's head (no unfinished delivery before it).
                AND (k.subscription_mode <> 'ordered' OR k.message_sequence = k.head_sequence)
          ) AS first_of_key
          WHERE first_of_key.rank_in_key = 1
            -- No delivery of the key holds an unexpired lease or waits on a request.
            AND NOT EXISTS (
                SELECT 1 FROM {schema}.runlane_runs o
                WHERE o.environment = %(environment)s AND o.task_id = first_of_key.task_id
                  AND o.partition_key = first_of_key.partition_key
                  AND ((o.status IN ('running', 'cancellation_requested')
                        AND o.lease_expires_at > %(now)s)
                       OR (o.status IN ('queued', 'scheduled', 'retrying', 'released')
                           AND o.delivery_requested_at IS NOT NULL))
            )
          ORDER BY first_of_key.run_at, first_of_key.id
          LIMIT %(limit)s
      ))
      AND r.delivery_requested_at IS NULL
      AND r.status IN ('queued', 'scheduled', 'retrying', 'released')
      AND r.run_at <= %(now)s
    FOR UPDATE OF r SKIP LOCKED
)
SELECT id, queue, concurrency_key
FROM (SELECT * FROM plain UNION ALL SELECT * FROM keyed) AS due
ORDER BY due.run_at, due.id
LIMIT %(limit)s;

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
