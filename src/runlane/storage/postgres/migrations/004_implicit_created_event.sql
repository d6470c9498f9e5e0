-- A run's run.created event is implied by its row (task, queue, creation time,
-- source and the first due time, kept here) instead of being stored as a second
-- row: creating a run writes one row, not two. Runs created before this version
-- have first_run_at NULL and keep their stored run.created event.
ALTER TABLE {schema}.runlane_runs ADD COLUMN IF NOT EXISTS first_run_at BIGINT;
