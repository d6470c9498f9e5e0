-- State transitions: compare-and-set on the expected event sequence.
-- Parameters are :named.

-- name: apply_transition
UPDATE runlane_runs
SET status = :status,
    run_at = COALESCE(:run_at, run_at),
    result = :result,
    failure = :failure,
    cancel_reason = :cancel_reason,
    failure_count = CASE WHEN :reset_failures THEN 0 ELSE failure_count END + :add_failure,
    replays = COALESCE(:replays, replays),
    dead_letter_reason = COALESCE(:dead_letter_reason, dead_letter_reason),
    dead_lettered_at = COALESCE(:dead_lettered_at, dead_lettered_at),
    event_sequence = event_sequence + :event_count,
    updated_at = :now,
    delivery_requested_at = NULL,
    lease_owner = CASE WHEN :keep_lease THEN lease_owner END,
    lease_token = CASE WHEN :keep_lease THEN lease_token END,
    lease_expires_at = CASE WHEN :keep_lease THEN lease_expires_at END,
    -- The row implies the success of its attempt (migration 016).
    succeeded_sequence = CASE WHEN :succeeded_attempt = attempt THEN event_sequence + 1
                              ELSE succeeded_sequence END,
    succeeded_at = CASE WHEN :succeeded_attempt = attempt THEN :now ELSE succeeded_at END
WHERE environment = :environment AND id = :id
  AND event_sequence = :expected_sequence
  AND (:lease_token IS NULL OR lease_token = :lease_token)
  AND (:lease_expired_by IS NULL OR lease_expires_at <= :lease_expired_by)
  -- :settles_alone: a settle that applies only to a run nothing depends on; one whose
  -- run has dependents applies again without it and counts them down (contract 8.1).
  AND (:settles_alone = 0 OR has_dependents = 0)
-- Whether the row took the success, and the sequence of the start it implies (which
-- the caller stores, read_start below, when the run is to be claimed again).
RETURNING coalesce(:succeeded_attempt = attempt, 0) AS success_implied, started_sequence;

-- name: apply_progress_transition
-- apply_transition for a settle that carries its attempt's last progress, which goes
-- on the row (migration 017), fenced by the same compare-and-set. A statement of its
-- own, so a settle without progress binds and writes no more than it did before
-- (a unit test keeps the two alike but for the progress columns). :progress is the
-- column's JSON array, built by the caller (transitions.progress_json): binding five
-- values for SQLite's json_array cost a few thousand instructions more a settle.
UPDATE runlane_runs
SET status = :status,
    run_at = COALESCE(:run_at, run_at),
    result = :result,
    failure = :failure,
    cancel_reason = :cancel_reason,
    failure_count = CASE WHEN :reset_failures THEN 0 ELSE failure_count END + :add_failure,
    replays = COALESCE(:replays, replays),
    dead_letter_reason = COALESCE(:dead_letter_reason, dead_letter_reason),
    dead_lettered_at = COALESCE(:dead_lettered_at, dead_lettered_at),
    event_sequence = event_sequence + :event_count,
    updated_at = :now,
    delivery_requested_at = NULL,
    lease_owner = CASE WHEN :keep_lease THEN lease_owner END,
    lease_token = CASE WHEN :keep_lease THEN lease_token END,
    lease_expires_at = CASE WHEN :keep_lease THEN lease_expires_at END,
    -- The row implies the success of its attempt (migration 016).
    succeeded_sequence = CASE WHEN :succeeded_attempt = attempt THEN event_sequence + 1
                              ELSE succeeded_sequence END,
    succeeded_at = CASE WHEN :succeeded_attempt = attempt THEN :now ELSE succeeded_at END,
    progress = :progress
WHERE environment = :environment AND id = :id
  AND event_sequence = :expected_sequence
  AND (:lease_token IS NULL OR lease_token = :lease_token)
  AND (:lease_expired_by IS NULL OR lease_expires_at <= :lease_expired_by)
  -- :settles_alone: a settle that applies only to a run nothing depends on; one whose
  -- run has dependents applies again without it and counts them down (contract 8.1).
  AND (:settles_alone = 0 OR has_dependents = 0)
-- Whether the row took the success, and the sequence of the start it implies (which
-- the caller stores, read_start below, when the run is to be claimed again).
RETURNING coalesce(:succeeded_attempt = attempt, 0) AS success_implied, started_sequence;

-- name: read_start
SELECT attempt, started_sequence, started_at, started_by, started_lease_expires_at
FROM runlane_runs WHERE environment = :environment AND id = :id;

-- name: insert_event_unless_stored
-- A start a row implied, stored before the run is claimed again (a second transition
-- into a claimable status finds it stored already).
INSERT INTO runlane_run_events (environment, run_id, sequence, type, occurred_at, data)
VALUES (:environment, :run_id, :sequence, :type, :occurred_at, :data)
ON CONFLICT DO NOTHING;
