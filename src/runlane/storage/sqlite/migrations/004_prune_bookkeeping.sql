-- Pruning a run also deletes its outbox rows and its schedule occurrence: both are
-- found by run id.
CREATE INDEX IF NOT EXISTS runlane_outbox_run ON runlane_outbox (run_id, environment);
CREATE INDEX IF NOT EXISTS runlane_schedule_occurrences_run
    ON runlane_schedule_occurrences (run_id, environment);
