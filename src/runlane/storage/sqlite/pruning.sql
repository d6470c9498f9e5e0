-- Pruning finished runs with everything that belongs to them.
-- Parameters are :named.

-- name: prune_runs
DELETE FROM runlane_runs
WHERE environment = :environment AND id IN (
    SELECT id FROM runlane_runs
    WHERE environment = :environment
      AND status IN (SELECT value FROM json_each(:statuses))
      AND updated_at < :older_than
      -- A finished run an unfinished run depends on stays (contract 8.1).
      AND NOT (has_dependents = 1 AND EXISTS (
          SELECT 1 FROM runlane_run_dependencies e
          JOIN runlane_runs w ON w.environment = e.environment AND w.id = e.dependent_id
          WHERE e.environment = :environment AND e.dependency_id = runlane_runs.id
            AND w.status NOT IN ('succeeded', 'failed', 'cancelled', 'discarded')))
    LIMIT :limit
)
RETURNING id;

-- name: delete_run_events
DELETE FROM runlane_run_events
WHERE environment = :environment AND run_id IN (SELECT value FROM json_each(:run_ids));

-- name: delete_idempotency_keys_of_runs
DELETE FROM runlane_idempotency_keys
WHERE environment = :environment AND run_id IN (SELECT value FROM json_each(:run_ids));

-- name: delete_outbox_of_runs
DELETE FROM runlane_outbox
WHERE environment = :environment AND run_id IN (SELECT value FROM json_each(:run_ids));

-- name: delete_schedule_occurrences_of_runs
-- A pruned run's slot lies long before its schedule's last_slot, so no tick
-- proposes it again: its occurrence row has done its job.
DELETE FROM runlane_schedule_occurrences
WHERE environment = :environment AND run_id IN (SELECT value FROM json_each(:run_ids));

-- name: prune_messages
-- Messages no run delivers any more, whose deduplication window ended before
-- :older_than (so no key or duplicate receipt can need them). Dead letters are
-- never pruned, so their messages stay.
DELETE FROM runlane_messages
WHERE environment = :environment AND id IN (
    SELECT m.id FROM runlane_messages m
    WHERE m.environment = :environment
      AND m.window_ends_at < :older_than
      AND NOT EXISTS (
          SELECT 1 FROM runlane_runs r
          WHERE r.environment = m.environment AND r.message_sequence = m.sequence
      )
    LIMIT :limit
);
