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
    lease_expires_at = CASE WHEN :keep_lease THEN lease_expires_at END
WHERE environment = :environment AND id = :id
  AND event_sequence = :expected_sequence
  AND (:lease_token IS NULL OR lease_token = :lease_token)
  AND (:lease_expired_by IS NULL OR lease_expires_at <= :lease_expired_by)
  -- :settles_alone: a settle that applies only to a run nothing depends on; one whose
  -- run has dependents applies again without it and counts them down (contract 8.1).
  AND (:settles_alone = 0 OR has_dependents = 0);
