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
SELECT queue, rate_key, tat FROM {schema}.runlane_rate_limits
WHERE environment = %(environment)s
ORDER BY queue, rate_key;

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
