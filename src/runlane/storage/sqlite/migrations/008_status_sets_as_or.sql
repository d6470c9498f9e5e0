-- Partial indexes name their status sets as OR chains instead of IN lists. SQLite
-- evaluates an index's WHERE on every row a statement inserts, updates or deletes,
-- and codes a constant IN list as a temporary table it fills at each execution of
-- the statement: with six such indexes, a one-row UPDATE that settles a run spent
-- more time building those tables than changing the row. The statements that use
-- these indexes name the same sets in the same OR form, which the planner needs in
-- order to match a query to a partial index. Same rows in every index.
DROP INDEX IF EXISTS runlane_runs_claimable;
CREATE INDEX runlane_runs_claimable
    ON runlane_runs (environment, queue, run_at, id)
    WHERE (status = 'queued' OR status = 'scheduled' OR status = 'retrying'
           OR status = 'released');

DROP INDEX IF EXISTS runlane_runs_leased;
CREATE INDEX runlane_runs_leased
    ON runlane_runs (environment, lease_expires_at)
    WHERE (status = 'running' OR status = 'cancellation_requested');

DROP INDEX IF EXISTS runlane_runs_singleton;
CREATE UNIQUE INDEX runlane_runs_singleton
    ON runlane_runs (environment, task_id, singleton_key)
    WHERE singleton_key IS NOT NULL
      AND (status = 'queued' OR status = 'scheduled' OR status = 'running'
           OR status = 'retrying' OR status = 'released'
           OR status = 'cancellation_requested');

DROP INDEX IF EXISTS runlane_runs_finished;
CREATE INDEX runlane_runs_finished
    ON runlane_runs (environment, updated_at)
    WHERE (status = 'succeeded' OR status = 'failed' OR status = 'cancelled'
           OR status = 'discarded');

DROP INDEX IF EXISTS runlane_runs_undelivered;
CREATE INDEX runlane_runs_undelivered
    ON runlane_runs (environment, queue, run_at)
    WHERE delivery_requested_at IS NULL
      AND (status = 'queued' OR status = 'scheduled' OR status = 'retrying'
           OR status = 'released');

DROP INDEX IF EXISTS runlane_runs_keyed;
CREATE INDEX runlane_runs_keyed
    ON runlane_runs (environment, task_id, partition_key, message_sequence)
    WHERE partition_key IS NOT NULL
      AND (status = 'queued' OR status = 'scheduled' OR status = 'retrying'
           OR status = 'released' OR status = 'running'
           OR status = 'cancellation_requested' OR status = 'dead_lettered');

DROP INDEX IF EXISTS runlane_outbox_due;
CREATE INDEX runlane_outbox_due
    ON runlane_outbox (environment, available_at)
    WHERE (status = 'pending' OR status = 'failed' OR status = 'claimed');
