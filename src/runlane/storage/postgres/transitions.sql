-- State transitions: compare-and-set on the expected event sequence.
-- Parameters are %(named)s; {schema} is the quoted schema name.

-- name: apply_transitions
-- Compare-and-set many runs at once: each row applies only while the run's
-- event_sequence is the expected one (and, when given, it still holds the lease,
-- or the lease has expired by then). Events are appended for the rows applied.
-- A batch never names one run twice; the driver splits such calls into rounds.
-- The transitions and their events travel as two JSON arrays of arrays (one
-- parameter each: cheaper to send than a dozen arrays; shapes.py declares their
-- fields); ids also come as an
-- array so the runs are found by primary key whatever the statistics say.
-- Implied events (migration 017): a settle whose only event is run.succeeded of the
-- row's attempt (succeeded_attempt, the event left out of the events array) keeps it
-- on the row, or appends it when the attempt is not the row's; a run made claimable
-- again gets the start its row implied stored, before its next claim overwrites it.
-- The last progress of the attempt a transition settles (fields 17-20, NULL when it
-- carries none) goes on the row (migration 018), fenced by the compare-and-set.
WITH input AS (
    SELECT t.x->>0 AS id, t.x->>1 AS status, (t.x->>2)::bigint AS run_at,
           nullif(t.x->3, 'null') AS result, nullif(t.x->4, 'null') AS failure,
           t.x->>5 AS cancel_reason, (t.x->>6)::int AS add_failure,
           (t.x->>7)::int AS event_count, (t.x->>8)::bool AS keep_lease,
           (t.x->>9)::int AS expected_sequence, t.x->>10 AS lease_token,
           (t.x->>11)::bigint AS lease_expired_by, (t.x->>12)::bool AS reset_failures,
           (t.x->>13)::int AS replays, t.x->>14 AS dead_letter_reason,
           (t.x->>15)::bigint AS dead_lettered_at, (t.x->>16)::int AS succeeded_attempt,
           (t.x->>17)::int AS progress_attempt, (t.x->>18)::float8 AS progress_fraction,
           t.x->>19 AS progress_message, (t.x->>20)::jsonb AS progress_data
    FROM jsonb_array_elements(%(transitions)s::jsonb) AS t(x)
),
updated AS (
    UPDATE {schema}.runlane_runs r
    SET status = input.status,
        run_at = COALESCE(input.run_at, r.run_at),
        result = input.result,
        failure = input.failure,
        cancel_reason = input.cancel_reason,
        failure_count = CASE WHEN input.reset_failures THEN 0 ELSE r.failure_count END
                        + input.add_failure,
        replays = COALESCE(input.replays, r.replays),
        dead_letter_reason = COALESCE(input.dead_letter_reason, r.dead_letter_reason),
        dead_lettered_at = COALESCE(input.dead_lettered_at, r.dead_lettered_at),
        event_sequence = r.event_sequence + input.event_count,
        updated_at = %(now)s,
        delivery_requested_at = NULL,
        lease_owner = CASE WHEN input.keep_lease THEN r.lease_owner END,
        lease_token = CASE WHEN input.keep_lease THEN r.lease_token END,
        lease_expires_at = CASE WHEN input.keep_lease THEN r.lease_expires_at END,
        succeeded_sequence = CASE WHEN input.succeeded_attempt = r.attempt
                                  THEN r.event_sequence + 1 ELSE r.succeeded_sequence END,
        succeeded_at = CASE WHEN input.succeeded_attempt = r.attempt
                            THEN %(now)s ELSE r.succeeded_at END,
        progress_attempt = coalesce(input.progress_attempt, r.progress_attempt),
        progress_fraction = coalesce(input.progress_fraction, r.progress_fraction),
        progress_message = CASE WHEN input.progress_attempt IS NULL
                                THEN r.progress_message ELSE input.progress_message END,
        progress_data = CASE WHEN input.progress_attempt IS NULL
                             THEN r.progress_data ELSE input.progress_data END,
        progress_at = CASE WHEN input.progress_attempt IS NULL
                           THEN r.progress_at ELSE %(now)s END
    FROM input
    WHERE r.environment = %(environment)s AND r.id = input.id
      AND r.id = ANY(%(ids)b::text[])
      AND r.event_sequence = input.expected_sequence
      AND (input.lease_token IS NULL OR r.lease_token = input.lease_token)
      AND (input.lease_expired_by IS NULL OR r.lease_expires_at <= input.lease_expired_by)
    RETURNING r.id, r.status, r.attempt, r.event_sequence, r.started_sequence, r.started_at,
              r.started_by, r.started_lease_expires_at, input.succeeded_attempt
),
events AS (
    INSERT INTO {schema}.runlane_run_events (
        environment, run_id, sequence, type, occurred_at, data
    )
    SELECT %(environment)s, e.x->>0 AS run_id, (e.x->>1)::int AS sequence, e.x->>2 AS type,
           %(now)s, e.x->3 AS data
    FROM jsonb_array_elements(%(events)s::jsonb) AS e(x)
    JOIN updated ON updated.id = e.x->>0
    UNION ALL
    -- A success left out of the events whose attempt is not the row's.
    SELECT %(environment)s, id, event_sequence, 'run.succeeded', %(now)s,
           jsonb_build_object('attempt', succeeded_attempt)
    FROM updated
    WHERE succeeded_attempt <> attempt
),
stored_starts AS (
    INSERT INTO {schema}.runlane_run_events (
        environment, run_id, sequence, type, occurred_at, data
    )
    SELECT %(environment)s, id, started_sequence, 'run.started', started_at,
           jsonb_build_object(
               'attempt', attempt, 'worker_id', started_by,
               -- As Python's isoformat() writes a UTC time (as the row implied it): no
               -- fraction for a whole second, else six digits.
               'lease_expires_at',
               replace(to_char(to_timestamp(0) AT TIME ZONE 'UTC'
                               + started_lease_expires_at * interval '1 microsecond',
                               'YYYY-MM-DD"T"HH24:MI:SS.US'), '.000000', '') || '+00:00'
           )
    FROM updated
    WHERE started_sequence IS NOT NULL
      AND status IN ('queued', 'scheduled', 'retrying', 'released')
    ON CONFLICT DO NOTHING
)
SELECT id FROM updated;

-- name: apply_finishing_transitions
-- apply_transitions when one of its transitions finishes a run (the driver picks it):
-- the same statement, whole (a test holds the two alike), but for the update's last
-- condition, which announces the environment once for the statement (migration 021).
-- That one-time filter runs before the update writes a row: it names the environment
-- in the transaction-local setting runlane.announced and sends it as the notification
-- rl.runs.wait's waiters hear (pg_notify returns a void, not NULL), so the per-row
-- trigger of migration 012, whose WHEN clause is tested as each row is written, skips
-- the rows. Both are undone with the transaction (or a savepoint); the notification
-- goes out at commit. A transition that loses its compare-and-set has still announced:
-- a waiter re-reads and finds its run as it was. Two statements: a settle that
-- finishes nothing (a retry) pays nothing, and each stays within psycopg's 4,096-byte
-- cache of parsed queries.
WITH input AS (
    SELECT t.x->>0 AS id, t.x->>1 AS status, (t.x->>2)::bigint AS run_at,
           nullif(t.x->3, 'null') AS result, nullif(t.x->4, 'null') AS failure,
           t.x->>5 AS cancel_reason, (t.x->>6)::int AS add_failure,
           (t.x->>7)::int AS event_count, (t.x->>8)::bool AS keep_lease,
           (t.x->>9)::int AS expected_sequence, t.x->>10 AS lease_token,
           (t.x->>11)::bigint AS lease_expired_by, (t.x->>12)::bool AS reset_failures,
           (t.x->>13)::int AS replays, t.x->>14 AS dead_letter_reason,
           (t.x->>15)::bigint AS dead_lettered_at, (t.x->>16)::int AS succeeded_attempt,
           (t.x->>17)::int AS progress_attempt, (t.x->>18)::float8 AS progress_fraction,
           t.x->>19 AS progress_message, (t.x->>20)::jsonb AS progress_data
    FROM jsonb_array_elements(%(transitions)s::jsonb) AS t(x)
),
updated AS (
    UPDATE {schema}.runlane_runs r
    SET status = input.status,
        run_at = COALESCE(input.run_at, r.run_at),
        result = input.result,
        failure = input.failure,
        cancel_reason = input.cancel_reason,
        failure_count = CASE WHEN input.reset_failures THEN 0 ELSE r.failure_count END
                        + input.add_failure,
        replays = COALESCE(input.replays, r.replays),
        dead_letter_reason = COALESCE(input.dead_letter_reason, r.dead_letter_reason),
        dead_lettered_at = COALESCE(input.dead_lettered_at, r.dead_lettered_at),
        event_sequence = r.event_sequence + input.event_count,
        updated_at = %(now)s,
        delivery_requested_at = NULL,
        lease_owner = CASE WHEN input.keep_lease THEN r.lease_owner END,
        lease_token = CASE WHEN input.keep_lease THEN r.lease_token END,
        lease_expires_at = CASE WHEN input.keep_lease THEN r.lease_expires_at END,
        succeeded_sequence = CASE WHEN input.succeeded_attempt = r.attempt
                                  THEN r.event_sequence + 1 ELSE r.succeeded_sequence END,
        succeeded_at = CASE WHEN input.succeeded_attempt = r.attempt
                            THEN %(now)s ELSE r.succeeded_at END,
        progress_attempt = coalesce(input.progress_attempt, r.progress_attempt),
        progress_fraction = coalesce(input.progress_fraction, r.progress_fraction),
        progress_message = CASE WHEN input.progress_attempt IS NULL
                                THEN r.progress_message ELSE input.progress_message END,
        progress_data = CASE WHEN input.progress_attempt IS NULL
                             THEN r.progress_data ELSE input.progress_data END,
        progress_at = CASE WHEN input.progress_attempt IS NULL
                           THEN r.progress_at ELSE %(now)s END
    FROM input
    WHERE r.environment = %(environment)s AND r.id = input.id
      AND r.id = ANY(%(ids)b::text[])
      AND r.event_sequence = input.expected_sequence
      AND (input.lease_token IS NULL OR r.lease_token = input.lease_token)
      AND (input.lease_expired_by IS NULL OR r.lease_expires_at <= input.lease_expired_by)
      AND (SELECT pg_notify(%(channel)s, set_config('runlane.announced', %(environment)s, true)))
          IS NOT NULL
    RETURNING r.id, r.status, r.attempt, r.event_sequence, r.started_sequence, r.started_at,
              r.started_by, r.started_lease_expires_at, input.succeeded_attempt
),
events AS (
    INSERT INTO {schema}.runlane_run_events (
        environment, run_id, sequence, type, occurred_at, data
    )
    SELECT %(environment)s, e.x->>0 AS run_id, (e.x->>1)::int AS sequence, e.x->>2 AS type,
           %(now)s, e.x->3 AS data
    FROM jsonb_array_elements(%(events)s::jsonb) AS e(x)
    JOIN updated ON updated.id = e.x->>0
    UNION ALL
    -- A success left out of the events whose attempt is not the row's.
    SELECT %(environment)s, id, event_sequence, 'run.succeeded', %(now)s,
           jsonb_build_object('attempt', succeeded_attempt)
    FROM updated
    WHERE succeeded_attempt <> attempt
),
stored_starts AS (
    INSERT INTO {schema}.runlane_run_events (
        environment, run_id, sequence, type, occurred_at, data
    )
    SELECT %(environment)s, id, started_sequence, 'run.started', started_at,
           jsonb_build_object(
               'attempt', attempt, 'worker_id', started_by,
               -- As Python's isoformat() writes a UTC time (as the row implied it): no
               -- fraction for a whole second, else six digits.
               'lease_expires_at',
               replace(to_char(to_timestamp(0) AT TIME ZONE 'UTC'
                               + started_lease_expires_at * interval '1 microsecond',
                               'YYYY-MM-DD"T"HH24:MI:SS.US'), '.000000', '') || '+00:00'
           )
    FROM updated
    WHERE started_sequence IS NOT NULL
      AND status IN ('queued', 'scheduled', 'retrying', 'released')
    ON CONFLICT DO NOTHING
)
SELECT id FROM updated;
