-- Progress a task reports (ctx.progress): the latest value of a run, one row per run,
-- replaced by each write of the attempt that holds the lease. A separate table, so a
-- write touches neither the run's row nor its indexes, and nothing that reads runs
-- pays for it. Pruning a run deletes its row (pruning.sql).
CREATE TABLE IF NOT EXISTS runlane_run_progress (
    environment TEXT    NOT NULL,
    run_id      TEXT    NOT NULL,
    attempt     INTEGER NOT NULL,
    fraction    REAL    NOT NULL,
    message     TEXT,
    data        TEXT,
    updated_at  INTEGER NOT NULL,
    PRIMARY KEY (environment, run_id)
) WITHOUT ROWID;
