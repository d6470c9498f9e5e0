-- A run's run.created event is implied by its row (task, queue, creation time,
-- source and the first due time, kept here) instead of being stored as a second
-- row, as on PostgreSQL: creating a run writes one row, not two. Runs created
-- before this version have first_run_at NULL and keep their stored run.created event.
ALTER TABLE runlane_runs ADD COLUMN first_run_at INTEGER;
