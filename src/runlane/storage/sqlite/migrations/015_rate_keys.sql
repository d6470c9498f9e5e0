-- Rate limits per key (flow control, 7.1): a queue defined with rate_limit_by="key"
-- limits each run's rate key apart. Runs of such a queue store their key (the
-- unkeyed partition is ''); every other run keeps NULL and pays nothing below.
ALTER TABLE runlane_runs ADD COLUMN rate_key TEXT;

-- A key's waiting runs by due time: its earliest (due_at below) is the first entry.
CREATE INDEX runlane_runs_rate_keyed
    ON runlane_runs (environment, queue, rate_key, run_at, id)
    WHERE rate_key IS NOT NULL
      AND (status = 'queued' OR status = 'scheduled' OR status = 'retrying'
           OR status = 'released');

-- The same runs in claim order (claim_at, migration 014), for the claim that has a
-- token of the key: an ordered scan that stops at its tokens. A second index because
-- neither order gives the other's first entry, and only runs with a rate key pay it.
CREATE INDEX runlane_runs_rate_claim_order
    ON runlane_runs (environment, queue, rate_key, claim_at, id)
    WHERE rate_key IS NOT NULL
      AND (status = 'queued' OR status = 'scheduled' OR status = 'retrying'
           OR status = 'released');

-- Each partition's row tells a claim when the partition is worth a look, so that a
-- claim reads only partitions with both a token and a due run, however many others
-- are exhausted or idle (no head-of-line blocking, and a claim time that does not
-- grow with the number of keys):
--   token_at: when its next token comes (tat minus the tolerance of the limit the
--     last claimer applied; a claim checks the tokens again with its own limit);
--   due_at: never later than the earliest run_at of its waiting runs (the largest
--     integer when it has none); runs entering a waiting status lower it (the
--     triggers below), a claimer raises it again from the runs themselves;
--   ready_at: the later of the two, indexed;
--   version: counts the triggers' writes, so a PostgreSQL claimer raises due_at only
--     when no run arrived after it looked (SQLite's writers take turns anyway).
ALTER TABLE runlane_rate_limits ADD COLUMN token_at INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runlane_rate_limits ADD COLUMN due_at INTEGER NOT NULL DEFAULT 9223372036854775807;
ALTER TABLE runlane_rate_limits ADD COLUMN ready_at INTEGER NOT NULL DEFAULT 9223372036854775807;
ALTER TABLE runlane_rate_limits ADD COLUMN version INTEGER NOT NULL DEFAULT 0;

CREATE INDEX runlane_rate_limits_ready
    ON runlane_rate_limits (environment, queue, ready_at);

-- The triggers that keep due_at low (storage/sqlite/rate_limits.sql) are created by
-- the first write or claim of a run with a rate key, not here: SQLite runs a
-- trigger's WHEN inside a sub-program started for every row written, which files
-- without queues limited per key would pay on every insert, claim and settle.
