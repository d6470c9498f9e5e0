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
-- its tokens, then writes the partition's state back. Claimers of one queue take
-- turns under its capacity lock; runs arriving meanwhile lower due_at through the
-- trigger, which bumps version.

-- name: ready_rate_partitions
SELECT rate_key, tat, version FROM {schema}.runlane_rate_limits
WHERE environment = %(environment)s AND queue = %(queue)s AND ready_at <= %(now)s
ORDER BY ready_at, rate_key
LIMIT %(limit)s;

-- name: due_rate_keyed_runs
-- A key's due runs in claim order (run_at - priority_offset, migration 015). Ordered
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

-- name: try_lock_run_key
-- A keyed claim holds the queue's capacity lock: it tries a delivery's key lock
-- rather than wait for it (another claimer decides on that key; the run waits).
SELECT coalesce(bool_and(pg_try_advisory_xact_lock(hashtextextended(
    %(key_lock_prefix)s || length(r.task_id) || ':' || r.task_id || ':' || r.partition_key, 0
))), true) AS locked
FROM {schema}.runlane_runs r
WHERE r.environment = %(environment)s AND r.id = %(id)s AND r.partition_key IS NOT NULL;

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
