-- Rate limits (flow control, 7.1): each partition's GCRA state.
-- Parameters are %(named)s; {schema} is the quoted schema name.

-- name: get_rate_limit_state
SELECT tat FROM {schema}.runlane_rate_limits
WHERE environment = %(environment)s AND queue = %(queue)s AND rate_key = %(rate_key)s;

-- name: set_rate_limit_state
INSERT INTO {schema}.runlane_rate_limits (environment, queue, rate_key, tat)
VALUES (%(environment)s, %(queue)s, %(rate_key)s, %(tat)s)
ON CONFLICT (environment, queue, rate_key) DO UPDATE SET tat = excluded.tat;

-- name: list_rate_limit_states
-- due: the partition's due runs when it is a key's (runs of queues limited as a whole
-- carry no rate key: 0 for them).
SELECT p.queue, p.rate_key, p.tat, (
    SELECT count(*) FROM {schema}.runlane_runs r
    WHERE r.environment = p.environment AND r.queue = p.queue AND r.rate_key = p.rate_key
      AND r.status IN ('queued', 'scheduled', 'retrying', 'released')
      AND r.run_at <= %(now)s
) AS due
FROM {schema}.runlane_rate_limits p
WHERE p.environment = %(environment)s
ORDER BY p.queue, p.rate_key;

-- name: defer_delivery_request
-- execute_delivery's rate_limited path: the run keeps its delivery request, and a new
-- outbox row publishes its wakeup again once its partition has a token for it: the
-- next token plus one interval per due run of its queue that goes before it in claim
-- order (those take the tokens first), so a backlog's wakeups do not all come back at once.
WITH ahead AS (
    SELECT count(*) AS n FROM {schema}.runlane_runs o, {schema}.runlane_runs r
    WHERE r.environment = %(environment)s AND r.id = %(id)s
      AND o.environment = r.environment AND o.queue = r.queue
      AND o.status IN ('queued', 'scheduled', 'retrying', 'released')
      AND o.run_at <= %(now)s
      AND (r.rate_key IS NULL OR o.rate_key = r.rate_key)
      AND (o.run_at - o.priority_offset, o.id) < (r.run_at - r.priority_offset, r.id)
),
marked AS (
    UPDATE {schema}.runlane_runs r
    SET event_sequence = r.event_sequence + 1, delivery_requested_at = %(now)s
    WHERE r.environment = %(environment)s AND r.id = %(id)s
      AND r.status IN ('queued', 'scheduled', 'retrying', 'released')
    RETURNING r.id, r.queue, r.event_sequence, r.trace_carrier
),
events AS (
    INSERT INTO {schema}.runlane_run_events (
        environment, run_id, sequence, type, occurred_at, data
    )
    SELECT %(environment)s, id, event_sequence, 'run.delivery_requested', %(now)s,
           jsonb_build_object('queue', queue, 'outbox_id', id || '.' || event_sequence,
                              'reason', 'rate_limited')
    FROM marked
),
outbox AS (
    INSERT INTO {schema}.runlane_outbox (
        environment, id, run_id, queue, status, available_at, requested_at, trace_carrier
    )
    SELECT %(environment)s, id || '.' || event_sequence, id, queue, 'pending',
           %(available_at)s + %(interval)s * (SELECT n FROM ahead), %(now)s, trace_carrier
    FROM marked
)
SELECT count(*) AS deferred FROM marked;

-- Rate limits per key (migration 016): a claim reads only the partitions that have
-- both a token and a due run (ready_at), takes the oldest due runs of each within
-- its tokens, then writes the partition's state back, all in claim_rate_keyed_runs.
-- Claimers of one queue take turns under its capacity lock; runs arriving meanwhile
-- lower due_at through the trigger, which bumps version.

-- name: due_rate_keyed_runs
-- (The read of each partition's runs in claim_rate_keyed_runs, on its own, for plan
-- checks.) A key's due runs in claim order (run_at - priority_offset, migration 015). Ordered
-- by the rate key too (one value here), as runlane_runs_rate_claim_order is: only
-- that index gives the order, so even a generic plan never walks the queue's other
-- keys' due runs in runlane_runs_claim_order instead. %(horizon)s (now plus the
-- queue's priority window: no due run's claim time is later) ends the ordered scan,
-- and run_at <= now keeps runs that are not due yet out, whatever their priority.
SELECT id, concurrency_key FROM {schema}.runlane_runs
WHERE environment = %(environment)s AND queue = %(queue)s AND rate_key = %(rate_key)s
  AND status IN ('queued', 'scheduled', 'retrying', 'released')
  AND run_at - priority_offset <= %(horizon)s
  AND run_at <= %(now)s
ORDER BY rate_key, run_at - priority_offset, id
LIMIT %(limit)s;

-- name: get_rate_partition
SELECT tat, version FROM {schema}.runlane_rate_limits
WHERE environment = %(environment)s AND queue = %(queue)s AND rate_key = %(rate_key)s;

-- name: lock_rate_keyed_keys
-- A keyed claim's first statement, under the queue's capacity lock: of the runs it
-- may start (offered, the same text as in claim_rate_keyed_runs), the deliveries'
-- key locks, tried, never waited for (another claimer decides on that key; the run
-- waits). The lock ids taken go to runlane.rate_claim_keys until the transaction
-- ends, for the claim in the next statement (whose snapshot sees every decision on
-- those keys committed before). Task runs have no key: nothing is locked for them.
WITH partitions AS (
    -- The partitions worth a look (a token and a due run, by ready_at) in the order
    -- they are served, with the tokens each has by the GCRA of
    -- runlane.model.rate_limiting (tokens_available, in SQL; at most %(limit)s).
    SELECT p.rate_key, p.tat, p.version,
           row_number() OVER (ORDER BY p.ready_at, p.rate_key) AS place,
           CASE WHEN greatest(p.tat, %(now)s) - %(tolerance)s::bigint > %(now)s THEN 0
                ELSE least(%(burst)s::bigint, %(limit)s::bigint,
                           (%(now)s - greatest(p.tat, %(now)s) + %(tolerance)s::bigint)
                           / %(interval)s::bigint + 1)
           END AS tokens
    FROM (
        SELECT rate_key, tat, version, ready_at FROM {schema}.runlane_rate_limits
        WHERE environment = %(environment)s AND queue = %(queue)s AND ready_at <= %(now)s
        ORDER BY ready_at, rate_key
        LIMIT %(scan)s
    ) AS p
),
offered AS (
    -- Each partition's first due runs in claim order, as many as its tokens
    -- (runlane_runs_rate_claim_order, read as due_rate_keyed_runs reads it).
    SELECT d.*, partitions.place
    FROM partitions
    CROSS JOIN LATERAL (
        SELECT r.id, r.rate_key, r.concurrency_key, r.task_id, r.partition_key,
               r.subscription_mode, r.message_sequence,
               r.run_at - r.priority_offset AS claim_at
        FROM {schema}.runlane_runs r
        WHERE r.environment = %(environment)s AND r.queue = %(queue)s
          AND r.rate_key = partitions.rate_key
          AND r.status IN ('queued', 'scheduled', 'retrying', 'released')
          AND r.run_at - r.priority_offset <= %(horizon)s
          AND r.run_at <= %(now)s
        ORDER BY r.rate_key, r.run_at - r.priority_offset, r.id
        LIMIT partitions.tokens
    ) AS d
),
keys AS (
    SELECT DISTINCT hashtextextended(
        %(key_lock_prefix)s || length(o.task_id) || ':' || o.task_id || ':' || o.partition_key, 0
    ) AS lock_id
    FROM (SELECT * FROM offered ORDER BY place, claim_at, id LIMIT %(limit)s) AS o
    WHERE o.partition_key IS NOT NULL
)
SELECT set_config(
    'runlane.rate_claim_keys',
    coalesce(string_agg(taken.lock_id::text, ',' ORDER BY taken.lock_id), ''),
    true
) AS claim_keys
FROM (
    SELECT keys.lock_id FROM keys WHERE pg_try_advisory_xact_lock(keys.lock_id)
) AS taken;

-- name: claim_rate_keyed_runs
-- A queue limited per key, under its capacity lock, in one statement: of the
-- partitions that have a token and a due run (an index range, however many others
-- are exhausted), the first due runs of each in claim order within its tokens,
-- partition after partition up to %(limit)s, and within the queue's capacity when it
-- is bounded (%(concurrency_limit)s, else NULL); a delivery only under its key lock
-- (lock_rate_keyed_keys), by its key's rules (as claim_run) and one per key. Every
-- partition read is then settled: one token taken per run started (tat_after), its
-- next token (token_at) by this limit, and due_at again from its runs left waiting,
-- unless a run arrived since this statement's snapshot (the version moved: due_at
-- keeps the trigger's lower value, at worst a look too early).
WITH partitions AS (
    -- The partitions worth a look (a token and a due run, by ready_at) in the order
    -- they are served, with the tokens each has by the GCRA of
    -- runlane.model.rate_limiting (tokens_available, in SQL; at most %(limit)s).
    SELECT p.rate_key, p.tat, p.version,
           row_number() OVER (ORDER BY p.ready_at, p.rate_key) AS place,
           CASE WHEN greatest(p.tat, %(now)s) - %(tolerance)s::bigint > %(now)s THEN 0
                ELSE least(%(burst)s::bigint, %(limit)s::bigint,
                           (%(now)s - greatest(p.tat, %(now)s) + %(tolerance)s::bigint)
                           / %(interval)s::bigint + 1)
           END AS tokens
    FROM (
        SELECT rate_key, tat, version, ready_at FROM {schema}.runlane_rate_limits
        WHERE environment = %(environment)s AND queue = %(queue)s AND ready_at <= %(now)s
        ORDER BY ready_at, rate_key
        LIMIT %(scan)s
    ) AS p
),
offered AS (
    -- Each partition's first due runs in claim order, as many as its tokens
    -- (runlane_runs_rate_claim_order, read as due_rate_keyed_runs reads it).
    SELECT d.*, partitions.place
    FROM partitions
    CROSS JOIN LATERAL (
        SELECT r.id, r.rate_key, r.concurrency_key, r.task_id, r.partition_key,
               r.subscription_mode, r.message_sequence,
               r.run_at - r.priority_offset AS claim_at
        FROM {schema}.runlane_runs r
        WHERE r.environment = %(environment)s AND r.queue = %(queue)s
          AND r.rate_key = partitions.rate_key
          AND r.status IN ('queued', 'scheduled', 'retrying', 'released')
          AND r.run_at - r.priority_offset <= %(horizon)s
          AND r.run_at <= %(now)s
        ORDER BY r.rate_key, r.run_at - r.priority_offset, r.id
        LIMIT partitions.tokens
    ) AS d
),
held AS (
    SELECT string_to_array(
        nullif(current_setting('runlane.rate_claim_keys', true), ''), ','
    )::bigint[] AS lock_ids
),
allowed AS (
    SELECT o.*,
           row_number() OVER (
               PARTITION BY o.task_id, o.partition_key ORDER BY o.place, o.claim_at, o.id
           ) AS nth_of_key
    FROM offered o
    WHERE o.partition_key IS NULL OR (
        hashtextextended(
            %(key_lock_prefix)s || length(o.task_id) || ':' || o.task_id
            || ':' || o.partition_key, 0
        ) = ANY((SELECT lock_ids FROM held)::bigint[])
        AND NOT EXISTS (
            SELECT 1 FROM {schema}.runlane_runs b
            WHERE b.environment = %(environment)s AND b.task_id = o.task_id
              AND b.partition_key = o.partition_key
              AND b.status IN ('queued', 'scheduled', 'retrying', 'released', 'running',
                               'cancellation_requested', 'dead_lettered')
              AND ((b.status IN ('running', 'cancellation_requested')
                    AND b.lease_expires_at > %(now)s)
                   OR (o.subscription_mode = 'ordered'
                       AND b.message_sequence < o.message_sequence))
        )
    )
),
occupied AS (
    SELECT coalesce(r.concurrency_key, '') AS part, count(*) AS n
    FROM {schema}.runlane_runs r
    WHERE %(concurrency_limit)s::bigint IS NOT NULL
      AND r.environment = %(environment)s AND r.queue = %(queue)s
      AND r.status IN ('running', 'cancellation_requested')
      AND r.lease_expires_at > %(now)s
    GROUP BY coalesce(r.concurrency_key, '')
),
ranked AS (
    -- One delivery per key; each concurrency key's runs in the order they are served.
    SELECT a.id, a.place, a.claim_at, coalesce(a.concurrency_key, '') AS part,
           row_number() OVER (
               PARTITION BY coalesce(a.concurrency_key, '') ORDER BY a.place, a.claim_at, a.id
           ) AS nth_of_part
    FROM allowed a
    WHERE a.partition_key IS NULL OR a.nth_of_key = 1
),
candidates AS (
    SELECT r.id
    FROM {schema}.runlane_runs r
    WHERE r.environment = %(environment)s
      AND r.id = ANY(ARRAY(
          SELECT ranked.id
          FROM ranked
          LEFT JOIN occupied ON occupied.part = ranked.part
          WHERE %(concurrency_limit)s::bigint IS NULL
             OR ranked.nth_of_part <= %(concurrency_limit)s::bigint - coalesce(occupied.n, 0)
          ORDER BY ranked.place, ranked.claim_at, ranked.id
          LIMIT %(limit)s
      ))
      AND r.status IN ('queued', 'scheduled', 'retrying', 'released')
      AND r.run_at <= %(now)s
    FOR UPDATE OF r
),
claimed AS (
    UPDATE {schema}.runlane_runs r
    SET status = 'running',
        attempt = r.attempt + 1,
        event_sequence = r.event_sequence + 1,
        lease_owner = %(worker_id)s,
        lease_token = %(lease_token)s,
        lease_expires_at = %(lease_expires_at)s,
        reserved_until = NULL,
        updated_at = %(now)s,
        -- run.started is implied by these (migration 017).
        started_sequence = r.event_sequence + 1,
        started_at = %(now)s,
        started_by = %(worker_id)s,
        started_lease_expires_at = %(lease_expires_at)s
    WHERE r.environment = %(environment)s AND r.id = ANY(ARRAY(SELECT id FROM candidates))
    RETURNING r.*
),
settled AS (
    SELECT partitions.rate_key, partitions.version,
           CASE WHEN taken.n IS NULL THEN partitions.tat
                ELSE greatest(partitions.tat, %(now)s) + taken.n * %(interval)s::bigint
           END AS tat,
           -- The key's earliest run left waiting by due time (the first entry of
           -- runlane_runs_rate_keyed): this statement's snapshot still shows the runs
           -- it claims as waiting, so those are passed over by id.
           coalesce((
               SELECT r.run_at FROM {schema}.runlane_runs r
               WHERE r.environment = %(environment)s AND r.queue = %(queue)s
                 AND r.rate_key = partitions.rate_key
                 AND r.status IN ('queued', 'scheduled', 'retrying', 'released')
                 AND r.id <> ALL(ARRAY(
                     SELECT c.id FROM claimed c WHERE c.rate_key = partitions.rate_key
                 ))
               ORDER BY r.rate_key, r.run_at
               LIMIT 1
           ), 9223372036854775807) AS next_due
    FROM partitions
    LEFT JOIN (SELECT c.rate_key, count(*) AS n FROM claimed c GROUP BY c.rate_key) AS taken
        ON taken.rate_key = partitions.rate_key
),
written AS (
    UPDATE {schema}.runlane_rate_limits p
    SET tat = settled.tat,
        token_at = settled.tat - %(tolerance)s::bigint,
        due_at = CASE WHEN p.version = settled.version THEN settled.next_due ELSE p.due_at END,
        ready_at = greatest(
            settled.tat - %(tolerance)s::bigint,
            CASE WHEN p.version = settled.version THEN settled.next_due ELSE p.due_at END
        )
    FROM settled
    WHERE p.environment = %(environment)s AND p.queue = %(queue)s
      AND p.rate_key = settled.rate_key
)
SELECT * FROM claimed;

-- name: settle_rate_partition
-- The partition after a claim looked at it: its tat (and token_at, by the claimer's
-- limit), and due_at again from its runs, unless a run arrived since the claimer read
-- the version (due_at then keeps the trigger's lower value: at worst a look too early).
WITH next_due AS (
    -- The key's earliest waiting run by due time (not claim order: due_at says when
    -- a run may start), read as the first of runlane_runs_rate_keyed, ordered by the
    -- rate key too so that only that index gives the order.
    SELECT coalesce((
        SELECT r.run_at FROM {schema}.runlane_runs r
        WHERE r.environment = %(environment)s AND r.queue = %(queue)s
          AND r.rate_key = %(rate_key)s
          AND r.status IN ('queued', 'scheduled', 'retrying', 'released')
        ORDER BY r.rate_key, r.run_at
        LIMIT 1
    ), 9223372036854775807) AS at
)
UPDATE {schema}.runlane_rate_limits p
SET tat = %(tat)s,
    token_at = %(token_at)s,
    due_at = CASE WHEN p.version = %(version)s THEN next_due.at ELSE p.due_at END,
    ready_at = greatest(
        %(token_at)s::bigint,
        CASE WHEN p.version = %(version)s THEN next_due.at ELSE p.due_at END
    )
FROM next_due
WHERE p.environment = %(environment)s AND p.queue = %(queue)s
  AND p.rate_key = %(rate_key)s;

-- name: adopt_unkeyed_runs
-- A queue newly limited per key: its waiting runs written without a rate key join
-- the unkeyed partition (run_at is set so that the partition's trigger sees them).
UPDATE {schema}.runlane_runs
SET rate_key = '', run_at = run_at
WHERE environment = %(environment)s AND queue = %(queue)s AND rate_key IS NULL
  AND status IN ('queued', 'scheduled', 'retrying', 'released');

-- name: next_ready_partition
-- When the soonest partition with a due run gets its token (a worker pacing a backlog
-- claims then): the first ready_at after now, an index seek.
SELECT ready_at AS at FROM {schema}.runlane_rate_limits
WHERE environment = %(environment)s AND queue = %(queue)s AND ready_at > %(now)s
  AND ready_at < 9223372036854775807
ORDER BY ready_at
LIMIT 1;

-- name: retime_rate_partitions
-- Once per process and queue limited per key: each partition's next token as this
-- process's limit reads its stored state (a new deploy may have changed the limit;
-- the claim checks tokens with it anyway, this only moves when it looks).
UPDATE {schema}.runlane_rate_limits
SET token_at = tat - %(tolerance)s, ready_at = greatest(tat - %(tolerance)s, due_at)
WHERE environment = %(environment)s AND queue = %(queue)s
  AND token_at <> tat - %(tolerance)s;
