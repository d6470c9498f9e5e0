-- Pruning finished runs with everything that belongs to them.
-- Parameters are %(named)s; {schema} is the quoted schema name.

-- name: prune_runs
-- One bounded batch: the runs (their progress is on their rows), their history,
-- ownership, outbox and schedule occurrence rows together.
WITH doomed AS (
    SELECT id FROM {schema}.runlane_runs
    WHERE environment = %(environment)s
      AND status IN ('succeeded', 'failed', 'cancelled', 'discarded')
      AND status = ANY(%(statuses)b::text[])
      AND updated_at < %(older_than)s
      -- A finished run an unfinished run depends on stays (contract 8.1).
      AND NOT (has_dependents AND EXISTS (
          SELECT 1 FROM {schema}.runlane_run_dependencies e
          JOIN {schema}.runlane_runs w ON w.id = e.dependent_id AND w.environment = e.environment
          WHERE e.dependency_id = runlane_runs.id AND e.environment = %(environment)s
            AND w.status NOT IN ('succeeded', 'failed', 'cancelled', 'discarded')))
    ORDER BY updated_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
),
pruned AS (
    DELETE FROM {schema}.runlane_runs r
    WHERE r.environment = %(environment)s AND r.id = ANY(ARRAY(SELECT id FROM doomed))
    RETURNING r.id
),
history AS (
    DELETE FROM {schema}.runlane_run_events e
    WHERE e.environment = %(environment)s AND e.run_id = ANY(ARRAY(SELECT id FROM pruned))
),
ownership AS (
    DELETE FROM {schema}.runlane_idempotency_keys k
    WHERE k.environment = %(environment)s AND k.run_id = ANY(ARRAY(SELECT id FROM pruned))
),
outbox AS (
    DELETE FROM {schema}.runlane_outbox o
    WHERE o.environment = %(environment)s AND o.run_id = ANY(ARRAY(SELECT id FROM pruned))
),
-- A pruned run's slot lies long before its schedule's last_slot, so no tick
-- proposes it again: its occurrence row has done its job.
occurrences AS (
    DELETE FROM {schema}.runlane_schedule_occurrences s
    WHERE s.environment = %(environment)s AND s.run_id = ANY(ARRAY(SELECT id FROM pruned))
),
-- The edges of pruned runs, either way (a pruned dependency has nothing unfinished
-- waiting for it).
edges AS (
    DELETE FROM {schema}.runlane_run_dependencies d
    WHERE d.environment = %(environment)s
      AND (d.dependent_id = ANY(ARRAY(SELECT id FROM pruned))
           OR d.dependency_id = ANY(ARRAY(SELECT id FROM pruned)))
),
waiting AS (
    DELETE FROM {schema}.runlane_waiting_runs w
    WHERE w.environment = %(environment)s AND w.run_id = ANY(ARRAY(SELECT id FROM pruned))
),
membership AS (
    DELETE FROM {schema}.runlane_group_members m
    WHERE m.environment = %(environment)s AND m.run_id = ANY(ARRAY(SELECT id FROM pruned))
)
SELECT count(*) AS pruned FROM pruned;

-- name: prune_messages
-- Messages no run delivers any more, whose deduplication window ended before
-- older_than (so no key or duplicate receipt can need them); run after prune_runs
-- in its transaction. Dead letters are never pruned, so their messages stay.
DELETE FROM {schema}.runlane_messages m
WHERE m.environment = %(environment)s AND m.id = ANY(ARRAY(
    SELECT o.id FROM {schema}.runlane_messages o
    WHERE o.environment = %(environment)s AND o.window_ends_at < %(older_than)s
      AND NOT EXISTS (
          SELECT 1 FROM {schema}.runlane_runs r
          WHERE r.environment = o.environment AND r.message_sequence = o.sequence
      )
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
));
