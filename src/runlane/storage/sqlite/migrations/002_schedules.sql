-- Schedule state (pause flag, newest materialised slot) and claimed occurrences.
CREATE TABLE IF NOT EXISTS runlane_schedules (
    environment TEXT    NOT NULL,
    schedule_id TEXT    NOT NULL,
    last_slot   INTEGER,
    paused      INTEGER NOT NULL DEFAULT 0,
    updated_at  INTEGER NOT NULL,
    PRIMARY KEY (environment, schedule_id)
) WITHOUT ROWID;

-- The primary key is the deterministic occurrence id: one run per slot, ever.
CREATE TABLE IF NOT EXISTS runlane_schedule_occurrences (
    environment TEXT    NOT NULL,
    schedule_id TEXT    NOT NULL,
    slot        INTEGER NOT NULL,
    run_id      TEXT    NOT NULL,
    created_at  INTEGER NOT NULL,
    PRIMARY KEY (environment, schedule_id, slot)
) WITHOUT ROWID;
