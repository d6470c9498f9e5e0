-- A run's latest progress (ctx.progress) is kept on its row, not in a table of its
-- own (011's runlane_run_progress): the settle that carries an attempt's last value
-- writes it in the compare-and-set it makes anyway, where an upsert into the other
-- table cost a statement per run. No index holds these columns, so a write while the
-- attempt runs touches no index. progress_at is NULL while nothing was reported.
ALTER TABLE runlane_runs ADD COLUMN progress_attempt INTEGER;
ALTER TABLE runlane_runs ADD COLUMN progress_fraction REAL;
ALTER TABLE runlane_runs ADD COLUMN progress_message TEXT;
ALTER TABLE runlane_runs ADD COLUMN progress_data TEXT;
ALTER TABLE runlane_runs ADD COLUMN progress_at INTEGER;

-- The values stored before this version move to their runs' rows (a row whose run is
-- gone was pruning's to delete and goes with the table).
UPDATE runlane_runs
SET progress_attempt = p.attempt,
    progress_fraction = p.fraction,
    progress_message = p.message,
    progress_data = p.data,
    progress_at = p.updated_at
FROM runlane_run_progress AS p
WHERE p.environment = runlane_runs.environment AND p.run_id = runlane_runs.id;

DROP TABLE runlane_run_progress;
