-- Runs, their append-only history, and idempotency ownership, in one schema.
-- Times are BIGINT microseconds since the Unix epoch (as in SQLite); JSON is jsonb.
-- Ids sort bytewise (COLLATE "C") so pages and claim order match the SQLite driver
-- whatever the database's locale. Keys lead with the run id: batches of runs are
-- found by id (id = ANY(...)) with a plan that does not depend on statistics,
-- which a freshly filled table does not have yet.
CREATE TABLE IF NOT EXISTS {schema}.runlane_runs (
    environment      TEXT    NOT NULL,
    id               TEXT    COLLATE "C" NOT NULL,
    task_id          TEXT    NOT NULL,
    queue            TEXT    NOT NULL,
    status           TEXT    NOT NULL,
    payload          JSONB   NOT NULL,
    attempt          INTEGER NOT NULL DEFAULT 0,
    failure_count    INTEGER NOT NULL DEFAULT 0,
    run_at           BIGINT  NOT NULL,
    created_at       BIGINT  NOT NULL,
    updated_at       BIGINT  NOT NULL,
    event_sequence   INTEGER NOT NULL,
    source           JSONB   NOT NULL,
    result           JSONB,
    failure          JSONB,
    idempotency_key  TEXT,
    singleton_key    TEXT,
    concurrency_key  TEXT,
    trace_carrier    JSONB,
    lease_owner      TEXT,
    lease_token      TEXT,
    lease_expires_at BIGINT,
    cancel_reason    TEXT,
    PRIMARY KEY (id, environment)
);

-- Claims scan only runnable runs of one queue in claim order (run_at, id), so a
-- claim reads the first rows of the index however many runs the table holds.
CREATE INDEX IF NOT EXISTS runlane_runs_claimable
    ON {schema}.runlane_runs (environment, queue, run_at, id)
    WHERE status IN ('queued', 'scheduled', 'retrying', 'released');

-- Lease recovery scans only leased runs.
CREATE INDEX IF NOT EXISTS runlane_runs_leased
    ON {schema}.runlane_runs (environment, lease_expires_at)
    WHERE status IN ('running', 'cancellation_requested');

-- At most one active run per (task, singleton key), enforced by the database.
CREATE UNIQUE INDEX IF NOT EXISTS runlane_runs_singleton
    ON {schema}.runlane_runs (environment, task_id, singleton_key)
    WHERE singleton_key IS NOT NULL
      AND status IN ('queued', 'scheduled', 'running', 'retrying', 'released', 'cancellation_requested');

-- Pruning scans finished runs by age.
CREATE INDEX IF NOT EXISTS runlane_runs_finished
    ON {schema}.runlane_runs (environment, updated_at)
    WHERE status IN ('succeeded', 'failed', 'cancelled');

CREATE TABLE IF NOT EXISTS {schema}.runlane_run_events (
    environment TEXT    NOT NULL,
    run_id      TEXT    COLLATE "C" NOT NULL,
    sequence    INTEGER NOT NULL,
    type        TEXT    NOT NULL,
    occurred_at BIGINT  NOT NULL,
    data        JSONB   NOT NULL,
    PRIMARY KEY (run_id, environment, sequence)
);

-- expires_at NULL: ownership lasts only while the owner run is active.
CREATE TABLE IF NOT EXISTS {schema}.runlane_idempotency_keys (
    environment TEXT   NOT NULL,
    task_id     TEXT   NOT NULL,
    key         TEXT   NOT NULL,
    run_id      TEXT   COLLATE "C" NOT NULL,
    expires_at  BIGINT,
    PRIMARY KEY (environment, task_id, key)
);

-- Pruning drops the ownership rows of the runs it deletes.
CREATE INDEX IF NOT EXISTS runlane_idempotency_keys_run
    ON {schema}.runlane_idempotency_keys (run_id, environment);
