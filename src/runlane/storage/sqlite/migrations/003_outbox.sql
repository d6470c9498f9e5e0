-- Transport lanes: delivery requests (the outbox) and bounded-queue dispatch reservations.
ALTER TABLE runlane_runs ADD COLUMN delivery_requested_at INTEGER;
ALTER TABLE runlane_runs ADD COLUMN reserved_until INTEGER;

-- Runs that are runnable but have no delivery request yet (tick requests them).
CREATE INDEX IF NOT EXISTS runlane_runs_undelivered
    ON runlane_runs (environment, queue, run_at)
    WHERE delivery_requested_at IS NULL
      AND status IN ('queued', 'scheduled', 'retrying', 'released');

-- Reservations maintenance may have to expire.
CREATE INDEX IF NOT EXISTS runlane_runs_reserved
    ON runlane_runs (environment, reserved_until)
    WHERE reserved_until IS NOT NULL;

-- One row per wakeup to publish; status pending → claimed → published (or failed → retried).
CREATE TABLE IF NOT EXISTS runlane_outbox (
    environment         TEXT    NOT NULL,
    id                  TEXT    NOT NULL,
    run_id              TEXT    NOT NULL,
    queue               TEXT    NOT NULL,
    status              TEXT    NOT NULL,
    available_at        INTEGER NOT NULL,
    claimed_until       INTEGER,
    attempts            INTEGER NOT NULL DEFAULT 0,
    requested_at        INTEGER NOT NULL,
    trace_carrier       TEXT,
    last_error          TEXT,
    published_at        INTEGER,
    provider_message_id TEXT,
    PRIMARY KEY (environment, id)
) WITHOUT ROWID;

CREATE INDEX IF NOT EXISTS runlane_outbox_due
    ON runlane_outbox (environment, available_at)
    WHERE status IN ('pending', 'failed', 'claimed');
