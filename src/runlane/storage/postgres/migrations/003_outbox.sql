-- Transport lanes: delivery requests (the outbox) and bounded-queue dispatch reservations.
ALTER TABLE {schema}.runlane_runs ADD COLUMN IF NOT EXISTS delivery_requested_at BIGINT;
ALTER TABLE {schema}.runlane_runs ADD COLUMN IF NOT EXISTS reserved_until BIGINT;

-- Runs that are runnable but have no delivery request yet (tick requests them).
CREATE INDEX IF NOT EXISTS runlane_runs_undelivered
    ON {schema}.runlane_runs (environment, queue, run_at, id)
    WHERE delivery_requested_at IS NULL
      AND status IN ('queued', 'scheduled', 'retrying', 'released');

-- Reservations maintenance may have to expire.
CREATE INDEX IF NOT EXISTS runlane_runs_reserved
    ON {schema}.runlane_runs (environment, reserved_until)
    WHERE reserved_until IS NOT NULL;

-- One row per wakeup to publish; status pending → claimed → published (or failed → retried).
CREATE TABLE IF NOT EXISTS {schema}.runlane_outbox (
    environment         TEXT    NOT NULL,
    id                  TEXT    COLLATE "C" NOT NULL,
    run_id              TEXT    COLLATE "C" NOT NULL,
    queue               TEXT    NOT NULL,
    status              TEXT    NOT NULL,
    available_at        BIGINT  NOT NULL,
    claimed_until       BIGINT,
    attempts            INTEGER NOT NULL DEFAULT 0,
    requested_at        BIGINT  NOT NULL,
    trace_carrier       JSONB,
    last_error          JSONB,
    published_at        BIGINT,
    provider_message_id TEXT,
    PRIMARY KEY (id, environment)
);

CREATE INDEX IF NOT EXISTS runlane_outbox_due
    ON {schema}.runlane_outbox (environment, available_at)
    WHERE status IN ('pending', 'failed', 'claimed');
