-- Dependencies between runs (contract 8.1) and groups (8.2).
--
-- A run triggered with after=[...] is 'waiting'. Its count of unsettled dependencies
-- and its policy live in runlane_waiting_runs, one edge per dependency in
-- runlane_run_dependencies; a run that others depend on has has_dependents. Runs
-- gain that one column only: every run's row, claim and settle stay as before. A
-- dependency is settled once it is succeeded, failed, cancelled, discarded or
-- dead-lettered (a dead-lettered delivery counts as failed).
--
-- The release is done by the database itself, in the transaction that settles the
-- last dependency, whatever path settled it (an attempt's outcome, a lease expiry
-- past its last attempt, an operator's cancel, a dead letter): two triggers, so
-- that no write path can forget it.
--   runlane_dependency_settled: a run with has_dependents reaching a settled status
--     resolves its unresolved edges and counts each dependent down. The waiting row's
--     lock orders concurrent settles of one run's dependencies: exactly one of them
--     counts it down to zero.
--   runlane_dependencies_met: a waiting run counted down to zero becomes due
--     (queued, or scheduled for a later run_at, with its delivery request when
--     deliver_when_due) or cancelled with reason dependency_failed, naming the failed
--     dependency; a cancellation settles its own dependents in turn.
-- Runs without dependents pay only the first trigger's WHEN check on has_dependents.
-- "now" is the settling write's updated_at, so the triggers follow the clock of the
-- statement that fired them.

ALTER TABLE {schema}.runlane_runs
    ADD COLUMN IF NOT EXISTS has_dependents BOOLEAN NOT NULL DEFAULT false;

CREATE TABLE IF NOT EXISTS {schema}.runlane_waiting_runs (
    environment       TEXT    NOT NULL,
    run_id            TEXT    COLLATE "C" NOT NULL,
    pending           INTEGER NOT NULL,
    on_failure        TEXT    NOT NULL,
    deliver_when_due  BOOLEAN NOT NULL,
    failed_dependency TEXT    COLLATE "C",
    settled           BOOLEAN NOT NULL DEFAULT false,
    updated_at        BIGINT  NOT NULL,
    PRIMARY KEY (run_id, environment)
);

-- The safety net scans only runs still waiting.
CREATE INDEX IF NOT EXISTS runlane_waiting_runs_unsettled
    ON {schema}.runlane_waiting_runs (environment, run_id) WHERE NOT settled;

CREATE TABLE IF NOT EXISTS {schema}.runlane_run_dependencies (
    environment   TEXT    NOT NULL,
    dependent_id  TEXT    COLLATE "C" NOT NULL,
    position      INTEGER NOT NULL,
    dependency_id TEXT    COLLATE "C" NOT NULL,
    resolved      BOOLEAN NOT NULL DEFAULT false,
    PRIMARY KEY (dependent_id, position, environment)
);

-- A settling run finds its dependents; operators list a run's dependents.
CREATE INDEX IF NOT EXISTS runlane_run_dependencies_by_dependency
    ON {schema}.runlane_run_dependencies (dependency_id, environment);

CREATE TABLE IF NOT EXISTS {schema}.runlane_groups (
    environment TEXT    NOT NULL,
    id          TEXT    COLLATE "C" NOT NULL,
    task_id     TEXT    NOT NULL,
    total       INTEGER NOT NULL,
    callback_id TEXT    COLLATE "C",
    created_at  BIGINT  NOT NULL,
    PRIMARY KEY (id, environment)
);

CREATE TABLE IF NOT EXISTS {schema}.runlane_group_members (
    environment TEXT NOT NULL,
    group_id    TEXT COLLATE "C" NOT NULL,
    run_id      TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (group_id, run_id, environment)
);

CREATE OR REPLACE FUNCTION {schema}.runlane_dependency_settled() RETURNS trigger
LANGUAGE plpgsql AS $body$
BEGIN
    UPDATE {schema}.runlane_waiting_runs w
    SET pending = w.pending - 1,
        failed_dependency = CASE
            WHEN w.failed_dependency IS NULL AND NEW.status <> 'succeeded' THEN NEW.id
            ELSE w.failed_dependency END,
        updated_at = NEW.updated_at
    FROM {schema}.runlane_run_dependencies e
    WHERE e.dependency_id = NEW.id AND e.environment = NEW.environment AND NOT e.resolved
      AND w.run_id = e.dependent_id AND w.environment = NEW.environment
      AND NOT w.settled;
    UPDATE {schema}.runlane_run_dependencies
    SET resolved = true
    WHERE dependency_id = NEW.id AND environment = NEW.environment AND NOT resolved;
    RETURN NULL;
END
$body$;

CREATE OR REPLACE FUNCTION {schema}.runlane_dependencies_met() RETURNS trigger
LANGUAGE plpgsql AS $body$
DECLARE
    cancel BOOLEAN := NEW.failed_dependency IS NOT NULL AND NEW.on_failure = 'cancel';
    waiting RECORD;
    deliver BOOLEAN;
BEGIN
    UPDATE {schema}.runlane_waiting_runs SET settled = true
    WHERE run_id = NEW.run_id AND environment = NEW.environment;
    SELECT id, queue, run_at, event_sequence, trace_carrier INTO waiting
    FROM {schema}.runlane_runs
    WHERE id = NEW.run_id AND environment = NEW.environment AND status = 'waiting'
    FOR UPDATE;
    IF NOT FOUND THEN
        RETURN NULL;  -- cancelled by an operator meanwhile
    END IF;
    deliver := NOT cancel AND NEW.deliver_when_due AND waiting.run_at <= NEW.updated_at;
    INSERT INTO {schema}.runlane_run_events (
        environment, run_id, sequence, type, occurred_at, data
    ) VALUES (
        NEW.environment, waiting.id, waiting.event_sequence + 1,
        CASE WHEN cancel THEN 'run.cancelled' ELSE 'run.dependencies_met' END,
        NEW.updated_at,
        CASE WHEN cancel
             THEN jsonb_build_object('reason', 'dependency_failed',
                                     'dependency', NEW.failed_dependency)
             WHEN NEW.failed_dependency IS NOT NULL
             THEN jsonb_build_object('failed_dependency', NEW.failed_dependency)
             ELSE jsonb_build_object() END
    );
    IF deliver THEN
        INSERT INTO {schema}.runlane_run_events (
            environment, run_id, sequence, type, occurred_at, data
        ) VALUES (
            NEW.environment, waiting.id, waiting.event_sequence + 2, 'run.delivery_requested',
            NEW.updated_at,
            jsonb_build_object('queue', waiting.queue,
                               'outbox_id', waiting.id || '.' || (waiting.event_sequence + 2))
        );
        INSERT INTO {schema}.runlane_outbox (
            environment, id, run_id, queue, status, available_at, claimed_until,
            requested_at, trace_carrier
        ) VALUES (
            NEW.environment, waiting.id || '.' || (waiting.event_sequence + 2), waiting.id,
            waiting.queue, 'pending', NEW.updated_at, NULL, NEW.updated_at,
            waiting.trace_carrier
        );
    END IF;
    UPDATE {schema}.runlane_runs
    SET status = CASE WHEN cancel THEN 'cancelled'
                      WHEN waiting.run_at > NEW.updated_at THEN 'scheduled'
                      ELSE 'queued' END,
        cancel_reason = CASE WHEN cancel THEN 'dependency_failed' END,
        run_at = greatest(waiting.run_at, NEW.updated_at),
        delivery_requested_at = CASE WHEN deliver THEN NEW.updated_at END,
        event_sequence = waiting.event_sequence + CASE WHEN deliver THEN 2 ELSE 1 END,
        updated_at = NEW.updated_at
    WHERE id = NEW.run_id AND environment = NEW.environment;
    RETURN NULL;
END
$body$;

CREATE TRIGGER runlane_dependency_settled
AFTER UPDATE OF status ON {schema}.runlane_runs
FOR EACH ROW
WHEN (NEW.has_dependents
      AND NEW.status IN ('succeeded', 'failed', 'cancelled', 'discarded', 'dead_lettered'))
EXECUTE FUNCTION {schema}.runlane_dependency_settled();

CREATE TRIGGER runlane_dependencies_met
AFTER UPDATE OF pending ON {schema}.runlane_waiting_runs
FOR EACH ROW
WHEN (NEW.pending <= 0 AND NOT NEW.settled)
EXECUTE FUNCTION {schema}.runlane_dependencies_met();
