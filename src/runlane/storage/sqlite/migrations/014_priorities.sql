-- Priorities (flow control, 7.2). A run keeps its priority (-10..10) and the offset
-- it buys (microseconds, priority x the queue's priority window / 10, fixed when the
-- run is created), so retries and releases, which move run_at, keep its place.
-- claim_at is the run's place in its queue's claim order; VIRTUAL, so it costs no
-- storage and is computed only where the index below needs it.
ALTER TABLE runlane_runs ADD COLUMN priority INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runlane_runs ADD COLUMN priority_offset INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runlane_runs ADD COLUMN claim_at INTEGER
    GENERATED ALWAYS AS (run_at - priority_offset) VIRTUAL;

-- The claims read each queue's runnable runs in claim order: an ordered index scan
-- that stops at the claim's limit, whatever priorities the queue mixes. It replaces
-- runlane_runs_claimable (the same rows, in run_at order), which only the claims
-- read: one index less to keep up at every write of a run's status. (Every run of
-- a file without priorities has claim_at = run_at, so its order is the old one.)
DROP INDEX IF EXISTS runlane_runs_claimable;
CREATE INDEX IF NOT EXISTS runlane_runs_claim_order
    ON runlane_runs (environment, queue, claim_at, id)
    WHERE (status = 'queued' OR status = 'scheduled' OR status = 'retrying'
           OR status = 'released');
