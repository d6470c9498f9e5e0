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
-- outbox row publishes its wakeup again once its partition has a token.
UPDATE runlane_runs
SET event_sequence = event_sequence + 1, delivery_requested_at = :now
WHERE environment = :environment AND id = :id
  AND (status = 'queued' OR status = 'scheduled' OR status = 'retrying' OR status = 'released')
RETURNING id, queue, event_sequence, trace_carrier;

-- name: insert_deferred_outbox
INSERT INTO runlane_outbox (
    environment, id, run_id, queue, status, available_at, requested_at, trace_carrier
) VALUES (
    :environment, :id, :run_id, :queue, 'pending', :available_at, :now, :trace_carrier
);
