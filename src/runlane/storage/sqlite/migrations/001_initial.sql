-- Runs, their append-only history, and idempotency ownership.
-- Times are integer microseconds since the Unix epoch; JSON is text.
CREATE TABLE IF NOT EXISTS runlane_runs (
    environment      TEXT    NOT NULL,
    id               TEXT    NOT NULL,
    task_id          TEXT    NOT NULL,
    queue            TEXT    NOT NULL,
    status           TEXT    NOT NULL,
    payload          TEXT    NOT NULL,
    attempt          INTEGER NOT NULL DEFAULT 0,
    failure_count    INTEGER NOT NULL DEFAULT 0,
    run_at           INTEGER NOT NULL,
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL,
    event_sequence   INTEGER NOT NULL,
    source           TEXT    NOT NULL,
    result           TEXT,
    failure          TEXT,
    idempotency_key  TEXT,
    singleton_key    TEXT,
    concurrency_key  TEXT,
    trace_carrier    TEXT,
    lease_owner      TEXT,
    lease_token      TEXT,
    lease_expires_at INTEGER,
    cancel_reason    TEXT,
    PRIMARY KEY (environment, id)
);

-- Claims scan only runnable runs, oldest run_at first.
CREATE INDEX IF NOT EXISTS runlane_runs_claimable
    ON runlane_runs (environment, queue, run_at, id)
    WHERE status IN ('queued', 'scheduled', 'retrying', 'released');

-- Lease recovery scans only leased runs.
CREATE INDEX IF NOT EXISTS runlane_runs_leased
    ON runlane_runs (environment, lease_expires_at)
    WHERE status IN ('running', 'cancellation_requested');

-- At most one active run per (task, singleton key), enforced by the database.
CREATE UNIQUE INDEX IF NOT EXISTS runlane_runs_singleton
    ON runlane_runs (environment, task_id, singleton_key)
    WHERE singleton_key IS NOT NULL
      AND status IN ('queued', 'scheduled', 'running', 'retrying', 'released', 'cancellation_requested');

-- Pruning scans finished runs by age.
CREATE INDEX IF NOT EXISTS runlane_runs_finished
    ON runlane_runs (environment, updated_at)
    WHERE status IN ('succeeded', 'failed', 'cancelled');

CREATE TABLE IF NOT EXISTS runlane_run_events (
    environment TEXT    NOT NULL,
    run_id      TEXT    NOT NULL,
    sequence    INTEGER NOT NULL,
    type        TEXT    NOT NULL,
    occurred_at INTEGER NOT NULL,
    data        TEXT    NOT NULL,
    PRIMARY KEY (environment, run_id, sequence)
) WITHOUT ROWID;

-- expires_at NULL: ownership lasts only while the owner run is active.
CREATE TABLE IF NOT EXISTS runlane_idempotency_keys (
    environment TEXT    NOT NULL,
    task_id     TEXT    NOT NULL,
    key         TEXT    NOT NULL,
    run_id      TEXT    NOT NULL,
    expires_at  INTEGER,
    PRIMARY KEY (environment, task_id, key)
) WITHOUT ROWID;
