-- A run's latest progress (ctx.progress) is kept on its row, not in a table of its
-- own (011's runlane_run_progress): the settle that carries an attempt's last value
-- writes it in the compare-and-set it makes anyway, where an upsert into the other
-- table cost a statement per run. One column, a JSON array [attempt, fraction,
-- message, data, time written] (NULL while nothing was reported): every statement
-- that writes or returns a whole run pays for each column of the row, reporting or
-- not, and five would cost a drain without progress about 2 % (no index holds it).
ALTER TABLE runlane_runs ADD COLUMN progress TEXT;

-- The values stored before this version move to their runs' rows (a row whose run is
-- gone was pruning's to delete and goes with the table).
UPDATE runlane_runs
SET progress = json_array(p.attempt, p.fraction, p.message, json(p.data), p.updated_at)
FROM runlane_run_progress AS p
WHERE p.environment = runlane_runs.environment AND p.run_id = runlane_runs.id;

DROP TABLE runlane_run_progress;
