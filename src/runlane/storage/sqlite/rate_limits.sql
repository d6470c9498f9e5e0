-- Rate limits (flow control, 7.1): each partition's GCRA state.
-- Parameters are :named.

-- name: get_rate_limit_state
SELECT tat FROM runlane_rate_limits
WHERE environment = :environment AND queue = :queue AND rate_key = :rate_key;

-- name: set_rate_limit_state
INSERT INTO runlane_rate_limits (environment, queue, rate_key, tat)
VALUES (:environment, :queue, :rate_key, :tat)
ON CONFLICT (environment, queue, rate_key) DO UPDATE SET tat = excluded.tat;

-- name: list_rate_limit_states
-- due: the partition's due runs when it is a key's (runs of queues limited as a whole
-- carry no rate key: 0 for them).
SELECT p.queue, p.rate_key, p.tat, (
    SELECT count(*) FROM runlane_runs r INDEXED BY runlane_runs_rate_keyed
    WHERE r.environment = p.environment AND r.queue = p.queue AND r.rate_key = p.rate_key
      AND (r.status = 'queued' OR r.status = 'scheduled' OR r.status = 'retrying'
           OR r.status = 'released')
      AND r.run_at <= :now
) AS due
FROM runlane_rate_limits p
WHERE p.environment = :environment
ORDER BY p.queue, p.rate_key;

-- name: defer_delivery_request
-- execute_delivery's rate_limited path: the run keeps its delivery request, and a new
-- outbox row publishes its wakeup again once its partition has a token for it.
UPDATE runlane_runs
SET event_sequence = event_sequence + 1, delivery_requested_at = :now
WHERE environment = :environment AND id = :id
  AND (status = 'queued' OR status = 'scheduled' OR status = 'retrying' OR status = 'released')
RETURNING id, queue, event_sequence, trace_carrier;

-- name: due_runs_ahead
-- How many due runs of the run's queue go before it (in claim order): the tokens they
-- take first. Deferred wakeups are spread one interval apart by it, so a backlog's
-- wakeups do not all come back at the next token to be ignored again.
SELECT count(*) AS ahead FROM runlane_runs o, runlane_runs r
WHERE r.environment = :environment AND r.id = :id
  AND o.environment = r.environment AND o.queue = r.queue
  AND (o.status = 'queued' OR o.status = 'scheduled' OR o.status = 'retrying'
       OR o.status = 'released')
  AND o.run_at <= :now
  AND (r.rate_key IS NULL OR o.rate_key = r.rate_key)
  AND (o.claim_at < r.claim_at OR (o.claim_at = r.claim_at AND o.id < r.id));

-- name: insert_deferred_outbox
INSERT INTO runlane_outbox (
    environment, id, run_id, queue, status, available_at, requested_at, trace_carrier
) VALUES (
    :environment, :id, :run_id, :queue, 'pending', :available_at, :now, :trace_carrier
);

-- Rate limits per key (migration 015): a claim reads only the partitions that have
-- both a token and a due run (ready_at), takes the oldest due runs of each within
-- its tokens, then writes the partition's state back.

-- name: ready_rate_partitions
SELECT rate_key, tat, version FROM runlane_rate_limits
WHERE environment = :environment AND queue = :queue AND ready_at <= :now
ORDER BY ready_at, rate_key
LIMIT :limit;

-- name: due_rate_keyed_runs
-- A key's due runs in claim order (claim_at, migration 014); :horizon (now plus the
-- queue's priority window: no due run's claim_at is later) ends the ordered scan, and
-- run_at <= :now keeps runs that are not due yet out, whatever their priority.
SELECT id, concurrency_key FROM runlane_runs INDEXED BY runlane_runs_rate_claim_order
WHERE environment = :environment AND queue = :queue AND rate_key = :rate_key
  AND (status = 'queued' OR status = 'scheduled' OR status = 'retrying'
       OR status = 'released')
  AND claim_at <= :horizon
  AND run_at <= :now
ORDER BY claim_at, id
LIMIT :limit;

-- name: get_rate_partition
SELECT tat, version FROM runlane_rate_limits
WHERE environment = :environment AND queue = :queue AND rate_key = :rate_key;

-- name: settle_rate_partition
-- The partition after a claim looked at it: its tat (and token_at, by the claimer's
-- limit), and due_at again from its runs (the earliest run_at of those waiting).
UPDATE runlane_rate_limits
SET tat = :tat,
    token_at = :token_at,
    due_at = coalesce((
        SELECT min(r.run_at) FROM runlane_runs r INDEXED BY runlane_runs_rate_keyed
        WHERE r.environment = :environment AND r.queue = :queue AND r.rate_key = :rate_key
          AND (r.status = 'queued' OR r.status = 'scheduled' OR r.status = 'retrying'
               OR r.status = 'released')
    ), 9223372036854775807),
    ready_at = max(:token_at, coalesce((
        SELECT min(r.run_at) FROM runlane_runs r INDEXED BY runlane_runs_rate_keyed
        WHERE r.environment = :environment AND r.queue = :queue AND r.rate_key = :rate_key
          AND (r.status = 'queued' OR r.status = 'scheduled' OR r.status = 'retrying'
               OR r.status = 'released')
    ), 9223372036854775807))
WHERE environment = :environment AND queue = :queue AND rate_key = :rate_key;

-- name: adopt_unkeyed_runs
-- A queue newly limited per key: its waiting runs written without a rate key join
-- the unkeyed partition (run_at is set so that the partition's trigger sees them).
UPDATE runlane_runs
SET rate_key = '', run_at = run_at
WHERE environment = :environment AND queue = :queue AND rate_key IS NULL
  AND (status = 'queued' OR status = 'scheduled' OR status = 'retrying'
       OR status = 'released');

-- name: next_ready_partition
-- When the soonest partition with a due run gets its token (a worker pacing a backlog
-- claims then): the first ready_at after now, an index seek.
SELECT ready_at AS at FROM runlane_rate_limits
WHERE environment = :environment AND queue = :queue AND ready_at > :now
  AND ready_at < 9223372036854775807
ORDER BY ready_at
LIMIT 1;

-- Runs entering a waiting status (created, retried, released, recovered, released by
-- their dependencies) lower their partition's due_at and ready_at, creating its row
-- the first time. Created by ensure_rate_key_triggers (claims.py) with the first
-- write or claim of a run with a rate key, in that write's transaction.

-- name: create_rate_key_created_trigger
CREATE TRIGGER IF NOT EXISTS runlane_rate_key_run_created
AFTER INSERT ON runlane_runs
WHEN NEW.rate_key IS NOT NULL
 AND (NEW.status = 'queued' OR NEW.status = 'scheduled' OR NEW.status = 'retrying'
      OR NEW.status = 'released')
BEGIN
    INSERT INTO runlane_rate_limits (
        environment, queue, rate_key, tat, token_at, due_at, ready_at, version
    ) VALUES (NEW.environment, NEW.queue, NEW.rate_key, 0, 0, NEW.run_at, NEW.run_at, 1)
    ON CONFLICT (environment, queue, rate_key) DO UPDATE
    SET due_at = min(due_at, excluded.due_at),
        ready_at = max(token_at, min(due_at, excluded.due_at)),
        version = version + 1;
END;

-- name: create_rate_key_waiting_trigger
CREATE TRIGGER IF NOT EXISTS runlane_rate_key_run_waiting
AFTER UPDATE OF status, run_at ON runlane_runs
WHEN NEW.rate_key IS NOT NULL
 AND (NEW.status = 'queued' OR NEW.status = 'scheduled' OR NEW.status = 'retrying'
      OR NEW.status = 'released')
BEGIN
    INSERT INTO runlane_rate_limits (
        environment, queue, rate_key, tat, token_at, due_at, ready_at, version
    ) VALUES (NEW.environment, NEW.queue, NEW.rate_key, 0, 0, NEW.run_at, NEW.run_at, 1)
    ON CONFLICT (environment, queue, rate_key) DO UPDATE
    SET due_at = min(due_at, excluded.due_at),
        ready_at = max(token_at, min(due_at, excluded.due_at)),
        version = version + 1;
END;

-- name: retime_rate_partitions
-- Once per process and queue limited per key: each partition's next token as this
-- process's limit reads its stored state (a new deploy may have changed the limit;
-- the claim checks tokens with it anyway, this only moves when it looks).
UPDATE runlane_rate_limits
SET token_at = tat - :tolerance, ready_at = max(tat - :tolerance, due_at)
WHERE environment = :environment AND queue = :queue AND token_at <> tat - :tolerance;
