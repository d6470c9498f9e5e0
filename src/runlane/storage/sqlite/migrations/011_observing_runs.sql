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

-- Throughput charts read a small rollup, never the runs: each runtime adds what its
-- attempts did, per queue, minute and series (an outcome or a start-latency bucket;
-- runlane.model.throughput), in one write every few seconds. A day of one queue is
-- at most 1,440 minutes times 21 series, whatever the number of runs; rows older than
-- the longest window are dropped as new ones are written.
CREATE TABLE IF NOT EXISTS runlane_throughput (
    environment TEXT    NOT NULL,
    queue       TEXT    NOT NULL,
    minute      INTEGER NOT NULL,
    series      TEXT    NOT NULL,
    n           INTEGER NOT NULL,
    PRIMARY KEY (environment, queue, minute, series)
) WITHOUT ROWID;

-- The overview sums every queue of a window: a range of minutes.
CREATE INDEX IF NOT EXISTS runlane_throughput_by_minute
    ON runlane_throughput (environment, minute);
