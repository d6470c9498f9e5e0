-- Schedule state (pause flag, newest materialised slot) and claimed occurrences.
CREATE TABLE IF NOT EXISTS {schema}.runlane_schedules (
    environment TEXT    NOT NULL,
    schedule_id TEXT    NOT NULL,
    last_slot   BIGINT,
    paused      BOOLEAN NOT NULL DEFAULT false,
    updated_at  BIGINT  NOT NULL,
    PRIMARY KEY (environment, schedule_id)
);

-- The primary key is the deterministic occurrence id: one run per slot, ever.
CREATE TABLE IF NOT EXISTS {schema}.runlane_schedule_occurrences (
    environment TEXT   NOT NULL,
    schedule_id TEXT   NOT NULL,
    slot        BIGINT NOT NULL,
    run_id      TEXT   COLLATE "C" NOT NULL,
    created_at  BIGINT NOT NULL,
    PRIMARY KEY (environment, schedule_id, slot)
);
