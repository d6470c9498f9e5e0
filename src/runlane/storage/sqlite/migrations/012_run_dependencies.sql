-- Dependencies between runs (contract 8.1) and groups (8.2).
--
-- A run triggered with after=[...] is 'waiting'. Its count of unsettled dependencies
-- and its policy live in runlane_waiting_runs, one edge per dependency in
-- runlane_run_dependencies; a run that others depend on has has_dependents = 1.
-- runlane_runs gains that one column only: every run's row, claim and settle stay
-- as wide as before. A dependency is settled once it is succeeded, failed,
-- cancelled, discarded or dead-lettered (a dead-lettered delivery counts as failed).
--
-- The release happens in the transaction that settles the last dependency, whatever
-- path settled it (an attempt's outcome, a lease expiry past its last attempt, an
-- operator's cancel, a dead letter): every one of them is a compare-and-set of
-- apply_transition, after which the driver looks, once per batch, for settled runs
-- with has_dependents and counts their dependents down (count_down_dependents in
-- dependencies.sql). An AFTER UPDATE trigger on runlane_runs would do the same
-- without the driver, but SQLite runs a trigger's program for every row every claim
-- and settle updates (4 % more instructions per run in a drain, bench/README.md).
--   runlane_dependencies_met: a waiting run counted down to zero becomes due
--     (queued, or scheduled for a later run_at, with its delivery request when
--     deliver_when_due) or cancelled with reason dependency_failed, naming the failed
--     dependency; the driver then settles that cancelled run's own dependents.
-- "now" is the settling write's time, carried in the waiting row's updated_at.

ALTER TABLE runlane_runs ADD COLUMN has_dependents INTEGER NOT NULL DEFAULT 0;

CREATE TABLE IF NOT EXISTS runlane_waiting_runs (
    environment       TEXT    NOT NULL,
    run_id            TEXT    NOT NULL,
    pending           INTEGER NOT NULL,
    on_failure        TEXT    NOT NULL,
    deliver_when_due  INTEGER NOT NULL,
    failed_dependency TEXT,
    settled           INTEGER NOT NULL DEFAULT 0,
    updated_at        INTEGER NOT NULL,
    PRIMARY KEY (environment, run_id)
) WITHOUT ROWID;

-- The safety net scans only runs still waiting.
CREATE INDEX IF NOT EXISTS runlane_waiting_runs_unsettled
    ON runlane_waiting_runs (environment, run_id) WHERE settled = 0;

CREATE TABLE IF NOT EXISTS runlane_run_dependencies (
    environment   TEXT    NOT NULL,
    dependent_id  TEXT    NOT NULL,
    position      INTEGER NOT NULL,
    dependency_id TEXT    NOT NULL,
    resolved      INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (environment, dependent_id, position)
) WITHOUT ROWID;

-- A settling run finds its dependents; operators list a run's dependents.
CREATE INDEX IF NOT EXISTS runlane_run_dependencies_by_dependency
    ON runlane_run_dependencies (environment, dependency_id);

CREATE TABLE IF NOT EXISTS runlane_groups (
    environment TEXT    NOT NULL,
    id          TEXT    NOT NULL,
    task_id     TEXT    NOT NULL,
    total       INTEGER NOT NULL,
    callback_id TEXT,
    created_at  INTEGER NOT NULL,
    PRIMARY KEY (environment, id)
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS runlane_group_members (
    environment TEXT NOT NULL,
    group_id    TEXT NOT NULL,
    run_id      TEXT NOT NULL,
    PRIMARY KEY (environment, group_id, run_id)
) WITHOUT ROWID;

CREATE TRIGGER IF NOT EXISTS runlane_dependencies_met
AFTER UPDATE OF pending ON runlane_waiting_runs
WHEN NEW.pending <= 0 AND NEW.settled = 0
BEGIN
    UPDATE runlane_waiting_runs SET settled = 1
    WHERE environment = NEW.environment AND run_id = NEW.run_id;
    INSERT INTO runlane_run_events (environment, run_id, sequence, type, occurred_at, data)
    SELECT r.environment, r.id, r.event_sequence + 1,
           CASE WHEN NEW.failed_dependency IS NOT NULL AND NEW.on_failure = 'cancel'
                THEN 'run.cancelled' ELSE 'run.dependencies_met' END,
           NEW.updated_at,
           CASE WHEN NEW.failed_dependency IS NOT NULL AND NEW.on_failure = 'cancel'
                THEN json_object('reason', 'dependency_failed',
                                 'dependency', NEW.failed_dependency)
                WHEN NEW.failed_dependency IS NOT NULL
                THEN json_object('failed_dependency', NEW.failed_dependency)
                ELSE '{}' END
    FROM runlane_runs r
    WHERE r.environment = NEW.environment AND r.id = NEW.run_id AND r.status = 'waiting';
    INSERT INTO runlane_run_events (environment, run_id, sequence, type, occurred_at, data)
    SELECT r.environment, r.id, r.event_sequence + 2, 'run.delivery_requested',
           NEW.updated_at,
           json_object('queue', r.queue, 'outbox_id', r.id || '.' || (r.event_sequence + 2))
    FROM runlane_runs r
    WHERE r.environment = NEW.environment AND r.id = NEW.run_id AND r.status = 'waiting'
      AND NEW.deliver_when_due = 1 AND r.run_at <= NEW.updated_at
      AND NOT (NEW.failed_dependency IS NOT NULL AND NEW.on_failure = 'cancel');
    INSERT INTO runlane_outbox (
        environment, id, run_id, queue, status, available_at, claimed_until, requested_at,
        trace_carrier
    )
    SELECT r.environment, r.id || '.' || (r.event_sequence + 2), r.id, r.queue, 'pending',
           NEW.updated_at, NULL, NEW.updated_at, r.trace_carrier
    FROM runlane_runs r
    WHERE r.environment = NEW.environment AND r.id = NEW.run_id AND r.status = 'waiting'
      AND NEW.deliver_when_due = 1 AND r.run_at <= NEW.updated_at
      AND NOT (NEW.failed_dependency IS NOT NULL AND NEW.on_failure = 'cancel');
    UPDATE runlane_runs
    SET status = CASE
            WHEN NEW.failed_dependency IS NOT NULL AND NEW.on_failure = 'cancel'
            THEN 'cancelled'
            WHEN run_at > NEW.updated_at THEN 'scheduled'
            ELSE 'queued' END,
        cancel_reason = CASE
            WHEN NEW.failed_dependency IS NOT NULL AND NEW.on_failure = 'cancel'
            THEN 'dependency_failed' END,
        delivery_requested_at = CASE
            WHEN NEW.deliver_when_due = 1 AND run_at <= NEW.updated_at
                 AND NOT (NEW.failed_dependency IS NOT NULL AND NEW.on_failure = 'cancel')
            THEN NEW.updated_at END,
        event_sequence = event_sequence + CASE
            WHEN NEW.deliver_when_due = 1 AND run_at <= NEW.updated_at
                 AND NOT (NEW.failed_dependency IS NOT NULL AND NEW.on_failure = 'cancel')
            THEN 2 ELSE 1 END,
        run_at = max(run_at, NEW.updated_at),
        updated_at = NEW.updated_at
    WHERE environment = NEW.environment AND id = NEW.run_id AND status = 'waiting';
END;
