-- Progress a task reports (ctx.progress): the latest value of a run, one row per run,
-- replaced by each write of the attempt that holds the lease. A separate table, so a
-- write touches neither the run's row nor its indexes, and nothing that reads runs
-- pays for it. Pruning a run deletes its row (pruning.sql).
CREATE TABLE IF NOT EXISTS {schema}.runlane_run_progress (
    environment TEXT             NOT NULL,
    run_id      TEXT             COLLATE "C" NOT NULL,
    attempt     INTEGER          NOT NULL,
    fraction    DOUBLE PRECISION NOT NULL,
    message     TEXT,
    data        JSONB,
    updated_at  BIGINT           NOT NULL,
    PRIMARY KEY (run_id, environment)
);

-- Waiters of rl.runs.wait hear that runs finished: a run that becomes terminal
-- notifies its environment's channel (runlane_finished_ and the md5 of the
-- environment, so a channel name stays within 63 bytes whatever the environment),
-- whichever statement finished it (a settle, a cancel, lease recovery, a discard).
-- The notification is sent at commit, and PostgreSQL folds equal notifications of
-- one transaction into one: a batch of settles announces once. The payload is the
-- environment; waiters re-read the runs they wait for.
CREATE OR REPLACE FUNCTION {schema}.runlane_announce_finished() RETURNS trigger
LANGUAGE plpgsql AS $announce$
BEGIN
    PERFORM pg_notify('runlane_finished_' || md5(NEW.environment), NEW.environment);
    RETURN NULL;
END
$announce$;

DROP TRIGGER IF EXISTS runlane_runs_finished ON {schema}.runlane_runs;
CREATE TRIGGER runlane_runs_finished
    AFTER UPDATE OF status ON {schema}.runlane_runs
    FOR EACH ROW
    WHEN (NEW.status IN ('succeeded', 'failed', 'cancelled', 'discarded')
          AND OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION {schema}.runlane_announce_finished();

-- Throughput charts read a small rollup, never the runs: each runtime adds what its
-- attempts did, per queue, minute and series (an outcome or a start-latency bucket;
-- runlane.model.throughput), in one write every few seconds, so no two writers wait
-- on one row for long. A day of one queue is at most 1,440 minutes times 21 series,
-- whatever the number of runs; rows older than the longest window are dropped as new
-- ones are written.
CREATE TABLE IF NOT EXISTS {schema}.runlane_throughput (
    environment TEXT   NOT NULL,
    queue       TEXT   NOT NULL,
    minute      BIGINT NOT NULL,
    series      TEXT   NOT NULL,
    n           BIGINT NOT NULL,
    PRIMARY KEY (environment, queue, minute, series)
);

-- The overview sums every queue of a window: a range of minutes.
CREATE INDEX IF NOT EXISTS runlane_throughput_by_minute
    ON {schema}.runlane_throughput (environment, minute);
