-- Dependencies between runs and groups (contract 8).
-- Parameters are %(named)s; {schema} is the quoted schema name. The release itself
-- is done by the triggers of migration 013 (runlane_dependency_settled,
-- runlane_dependencies_met).

-- name: mark_dependencies
-- The dependencies of a run about to be created, locked in id order (so that two
-- creations never wait for each other in opposite orders) and flagged: from now on
-- settling them counts their dependents down. A dependency being settled right now
-- is waited for, and its settled status is what this returns, so it is counted at
-- once; one settled later sees the new run's edges.
WITH locked AS (
    SELECT id FROM {schema}.runlane_runs
    WHERE id = ANY(%(ids)s::text[]) AND environment = %(environment)s
    ORDER BY id
    FOR UPDATE
)
UPDATE {schema}.runlane_runs r
SET has_dependents = true
FROM locked
WHERE r.id = locked.id AND r.environment = %(environment)s
RETURNING r.id, r.status;

-- name: insert_dependency_edges
INSERT INTO {schema}.runlane_run_dependencies (
    environment, dependent_id, position, dependency_id, resolved
)
SELECT %(environment)s, %(dependent_id)s, e.position, e.dependency_id, e.resolved
FROM unnest(%(positions)s::int[], %(dependency_ids)s::text[], %(resolved)s::bool[])
    AS e(position, dependency_id, resolved);

-- name: insert_waiting_run
-- A new waiting run's count and policy; then setting pending fires
-- runlane_dependencies_met when nothing is left to wait for, so a run whose
-- dependencies all finished before it was created is released (or cancelled) here.
WITH waiting AS (
    INSERT INTO {schema}.runlane_waiting_runs (
        environment, run_id, pending, on_failure, deliver_when_due, failed_dependency,
        updated_at
    ) VALUES (
        %(environment)s, %(id)s, %(pending)s, %(on_failure)s, %(deliver_when_due)s,
        %(failed_dependency)s, %(now)s
    )
    RETURNING run_id
)
SELECT run_id FROM waiting;

-- name: release_if_met
UPDATE {schema}.runlane_waiting_runs SET pending = pending
WHERE run_id = %(id)s AND environment = %(environment)s AND pending <= 0;

-- name: join_group
INSERT INTO {schema}.runlane_group_members (environment, group_id, run_id)
SELECT %(environment)s, %(group_id)s, unnest(%(ids)s::text[]);

-- name: list_dependencies
-- A run's dependencies, in the order given at trigger, as they are now.
SELECT r.* FROM {schema}.runlane_run_dependencies e
JOIN {schema}.runlane_runs r ON r.id = e.dependency_id AND r.environment = e.environment
WHERE e.dependent_id = %(run_id)s AND e.environment = %(environment)s
ORDER BY e.position;

-- name: list_dependents
-- The runs that wait (or waited) for a run, by id.
SELECT r.* FROM {schema}.runlane_run_dependencies e
JOIN {schema}.runlane_runs r ON r.id = e.dependent_id AND r.environment = e.environment
WHERE e.dependency_id = %(run_id)s AND e.environment = %(environment)s
ORDER BY r.id
LIMIT %(limit)s;

-- name: settle_stranded_waiting_runs
-- The safety net: waiting runs none of whose dependencies is unfinished (a missing,
-- pruned dependency counts as finished) get their count set to zero, which fires
-- runlane_dependencies_met. The failed dependency is recomputed from the statuses.
WITH stranded AS (
    SELECT w.run_id FROM {schema}.runlane_waiting_runs w
    JOIN {schema}.runlane_runs r ON r.id = w.run_id AND r.environment = w.environment
    WHERE w.environment = %(environment)s AND NOT w.settled AND r.status = 'waiting'
      AND NOT EXISTS (
          SELECT 1 FROM {schema}.runlane_run_dependencies e
          JOIN {schema}.runlane_runs d ON d.id = e.dependency_id
                                      AND d.environment = e.environment
          WHERE e.dependent_id = w.run_id AND e.environment = %(environment)s
            AND d.status NOT IN ('succeeded', 'failed', 'cancelled', 'discarded',
                                 'dead_lettered'))
    ORDER BY w.run_id
    LIMIT %(limit)s
    FOR UPDATE OF w SKIP LOCKED
)
UPDATE {schema}.runlane_waiting_runs w
SET pending = 0,
    failed_dependency = coalesce(w.failed_dependency, (
        SELECT e.dependency_id FROM {schema}.runlane_run_dependencies e
        JOIN {schema}.runlane_runs d ON d.id = e.dependency_id
                                    AND d.environment = e.environment
        WHERE e.dependent_id = w.run_id AND e.environment = %(environment)s
          AND d.status <> 'succeeded'
        ORDER BY e.position LIMIT 1)),
    updated_at = %(now)s
FROM stranded
WHERE w.run_id = stranded.run_id AND w.environment = %(environment)s AND NOT w.settled
RETURNING w.run_id;

-- name: insert_group
INSERT INTO {schema}.runlane_groups (environment, id, task_id, total, callback_id, created_at)
VALUES (%(environment)s, %(id)s, %(task_id)s, %(total)s, %(callback_id)s, %(now)s);

-- name: get_group
SELECT * FROM {schema}.runlane_groups WHERE id = %(id)s AND environment = %(environment)s;

-- name: group_counts
SELECT r.status, count(*) AS n FROM {schema}.runlane_group_members m
JOIN {schema}.runlane_runs r ON r.id = m.run_id AND r.environment = m.environment
WHERE m.group_id = %(group_id)s AND m.environment = %(environment)s
GROUP BY r.status;
