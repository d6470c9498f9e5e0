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
SELECT queue, rate_key, tat FROM runlane_rate_limits
WHERE environment = :environment
ORDER BY queue, rate_key;

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
  AND (o.claim_at < r.claim_at OR (o.claim_at = r.claim_at AND o.id < r.id));

-- name: insert_deferred_outbox
INSERT INTO runlane_outbox (
    environment, id, run_id, queue, status, available_at, requested_at, trace_carrier
) VALUES (
    :environment, :id, :run_id, :queue, 'pending', :available_at, :now, :trace_carrier
);
