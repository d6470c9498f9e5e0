-- A run's latest progress (ctx.progress) is kept on its row, not in a table of its
-- own (012's runlane_run_progress): the settle that carries an attempt's last value
-- writes it in the compare-and-set it makes anyway, where an upsert into the other
-- table cost an index insert and a row per run. No index holds these columns, so a
-- write while the attempt runs can stay a heap-only update. progress_at is NULL while
-- nothing was reported.
ALTER TABLE {schema}.runlane_runs
    ADD COLUMN IF NOT EXISTS progress_attempt INTEGER,
    ADD COLUMN IF NOT EXISTS progress_fraction DOUBLE PRECISION,
    ADD COLUMN IF NOT EXISTS progress_message TEXT,
    ADD COLUMN IF NOT EXISTS progress_data JSONB,
    ADD COLUMN IF NOT EXISTS progress_at BIGINT;

-- The values stored before this version move to their runs' rows (a row whose run is
-- gone was pruning's to delete and goes with the table).
UPDATE {schema}.runlane_runs r
SET progress_attempt = p.attempt,
    progress_fraction = p.fraction,
    progress_message = p.message,
    progress_data = p.data,
    progress_at = p.updated_at
FROM {schema}.runlane_run_progress p
WHERE p.environment = r.environment AND p.run_id = r.id;

DROP TABLE {schema}.runlane_run_progress;
