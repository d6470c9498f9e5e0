-- A run's run.started and run.succeeded events are implied by its row, as run.created
-- is since 009 (and as on PostgreSQL): a drained run writes one row, not three. The
-- row keeps what those events carry: the latest start (its event sequence and time,
-- the worker and the lease expiry it started with; the attempt is the row's) and,
-- when that attempt succeeded, the success's sequence and time. Runs written before
-- this version have these columns NULL and keep their stored events; a start the row
-- can no longer imply (its run is to be claimed again) is stored as a row by the
-- transition that makes it claimable, and a stored event always wins over an implied
-- one of the same sequence, so nothing is listed twice.
ALTER TABLE runlane_runs ADD COLUMN started_sequence INTEGER;
ALTER TABLE runlane_runs ADD COLUMN started_at INTEGER;
ALTER TABLE runlane_runs ADD COLUMN started_by TEXT;
ALTER TABLE runlane_runs ADD COLUMN started_lease_expires_at INTEGER;
ALTER TABLE runlane_runs ADD COLUMN succeeded_sequence INTEGER;
ALTER TABLE runlane_runs ADD COLUMN succeeded_at INTEGER;
