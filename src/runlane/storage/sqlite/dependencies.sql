-- Dependencies between runs and groups (contract 8).
-- Parameters are :named. The release itself is done by the triggers of
-- migration 012 (runlane_dependency_settled, runlane_dependencies_met).

-- name: dependency_statuses
-- The dependencies of a run about to be created, as they are now (the write lock
-- is held: none can settle before the run's edges are written).
SELECT id, status FROM runlane_runs
WHERE environment = :environment AND id IN (SELECT value FROM json_each(:ids));

-- name: mark_dependencies
-- From now on, settling these runs counts their dependents down (the triggers'
-- WHEN has_dependents).
UPDATE runlane_runs SET has_dependents = 1
WHERE environment = :environment AND id IN (SELECT value FROM json_each(:ids))
  AND has_dependents = 0;

-- name: insert_dependency_edges
-- :rows is a JSON array of [position, dependency id, resolved (0 or 1)].
INSERT INTO runlane_run_dependencies (
    environment, dependent_id, position, dependency_id, resolved
)
SELECT :environment, :dependent_id, json_extract(row.value, '$[0]'),
       json_extract(row.value, '$[1]'), json_extract(row.value, '$[2]')
FROM json_each(:rows) AS row;

-- name: settled_with_dependents
-- Of the runs a batch of transitions just wrote, those that others depend on and
-- that are now settled: their dependents are counted down.
SELECT id FROM runlane_runs
WHERE environment = :environment AND id IN (SELECT value FROM json_each(:ids))
  AND has_dependents = 1
  AND (status = 'succeeded' OR status = 'failed' OR status = 'cancelled'
       OR status = 'discarded' OR status = 'dead_lettered');

-- name: count_down_dependents
-- Each unresolved edge from a settled run counts its dependent down once (which
-- fires runlane_dependencies_met for a dependent counted down to zero); the first
-- dependency that did not succeed is remembered. Then the edges are resolved.
UPDATE runlane_waiting_runs
SET pending = pending - (
        SELECT count(*) FROM runlane_run_dependencies e
        WHERE e.environment = :environment AND e.dependent_id = runlane_waiting_runs.run_id
          AND e.resolved = 0 AND e.dependency_id IN (SELECT value FROM json_each(:ids))),
    failed_dependency = coalesce(failed_dependency, (
        SELECT e.dependency_id FROM runlane_run_dependencies e
        JOIN runlane_runs d ON d.environment = e.environment AND d.id = e.dependency_id
        WHERE e.environment = :environment AND e.dependent_id = runlane_waiting_runs.run_id
          AND e.resolved = 0 AND e.dependency_id IN (SELECT value FROM json_each(:ids))
          AND d.status <> 'succeeded'
        ORDER BY e.position LIMIT 1)),
    updated_at = :now
WHERE environment = :environment AND settled = 0
  AND run_id IN (SELECT dependent_id FROM runlane_run_dependencies
                 WHERE environment = :environment AND resolved = 0
                   AND dependency_id IN (SELECT value FROM json_each(:ids)));

-- name: resolve_edges
UPDATE runlane_run_dependencies SET resolved = 1
WHERE environment = :environment AND resolved = 0
  AND dependency_id IN (SELECT value FROM json_each(:ids))
RETURNING dependent_id;

-- name: insert_waiting_run
-- A new waiting run's count and policy.
INSERT INTO runlane_waiting_runs (
    environment, run_id, pending, on_failure, deliver_when_due, failed_dependency, updated_at
) VALUES (
    :environment, :id, :pending, :on_failure, :deliver_when_due, :failed_dependency, :now
);

-- name: release_if_met
-- Setting pending fires runlane_dependencies_met when nothing is left to wait for,
-- so a run whose dependencies all finished before it was created is released (or
-- cancelled) here.
UPDATE runlane_waiting_runs SET pending = pending
WHERE environment = :environment AND run_id = :id AND pending <= 0;

-- name: join_group
INSERT INTO runlane_group_members (environment, group_id, run_id)
SELECT :environment, :group_id, value FROM json_each(:ids);

-- name: delete_dependency_edges_of_runs
-- Pruning: the edges of pruned runs, either way (a pruned dependency has nothing
-- unfinished waiting for it).
DELETE FROM runlane_run_dependencies
WHERE environment = :environment
  AND (dependent_id IN (SELECT value FROM json_each(:run_ids))
       OR dependency_id IN (SELECT value FROM json_each(:run_ids)));

-- name: delete_waiting_rows_of_runs
DELETE FROM runlane_waiting_runs
WHERE environment = :environment AND run_id IN (SELECT value FROM json_each(:run_ids));

-- name: delete_group_membership_of_runs
DELETE FROM runlane_group_members
WHERE environment = :environment AND run_id IN (SELECT value FROM json_each(:run_ids));

-- name: list_dependencies
-- A run's dependencies, in the order given at trigger, as they are now.
SELECT r.* FROM runlane_run_dependencies e
JOIN runlane_runs r ON r.environment = e.environment AND r.id = e.dependency_id
WHERE e.environment = :environment AND e.dependent_id = :run_id
ORDER BY e.position;

-- name: list_dependents
-- The runs that wait (or waited) for a run, oldest first.
SELECT r.* FROM runlane_run_dependencies e
JOIN runlane_runs r ON r.environment = e.environment AND r.id = e.dependent_id
WHERE e.environment = :environment AND e.dependency_id = :run_id
ORDER BY r.id
LIMIT :limit;

-- name: settle_stranded_waiting_runs
-- The safety net: runs still waiting none of whose dependencies is unfinished (a
-- missing, pruned dependency counts as finished) get their count set to zero, which
-- fires runlane_dependencies_met. The failed dependency is recomputed from the
-- statuses.
UPDATE runlane_waiting_runs
SET pending = 0,
    failed_dependency = coalesce(failed_dependency, (
        SELECT e.dependency_id FROM runlane_run_dependencies e
        JOIN runlane_runs d ON d.environment = e.environment AND d.id = e.dependency_id
        WHERE e.environment = :environment AND e.dependent_id = runlane_waiting_runs.run_id
          AND d.status <> 'succeeded'
        ORDER BY e.position LIMIT 1)),
    updated_at = :now
WHERE environment = :environment AND settled = 0 AND run_id IN (
    SELECT w.run_id FROM runlane_waiting_runs w
    JOIN runlane_runs r ON r.environment = w.environment AND r.id = w.run_id
    WHERE w.environment = :environment AND w.settled = 0 AND r.status = 'waiting'
      AND NOT EXISTS (
          SELECT 1 FROM runlane_run_dependencies e
          JOIN runlane_runs d ON d.environment = e.environment AND d.id = e.dependency_id
          WHERE e.environment = :environment AND e.dependent_id = w.run_id
            AND d.status NOT IN ('succeeded', 'failed', 'cancelled', 'discarded',
                                 'dead_lettered'))
    LIMIT :limit)
RETURNING run_id;

-- name: insert_group
INSERT INTO runlane_groups (environment, id, task_id, total, callback_id, created_at)
VALUES (:environment, :id, :task_id, :total, :callback_id, :now);

-- name: get_group
SELECT * FROM runlane_groups WHERE environment = :environment AND id = :id;

-- name: group_counts
SELECT r.status, count(*) AS n FROM runlane_group_members m
JOIN runlane_runs r ON r.environment = m.environment AND r.id = m.run_id
WHERE m.environment = :environment AND m.group_id = :group_id
GROUP BY r.status;
