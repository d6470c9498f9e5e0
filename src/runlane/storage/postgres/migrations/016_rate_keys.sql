-- Rate limits per key (flow control, 7.1): a queue defined with rate_limit_by="key"
-- limits each run's rate key apart. Runs of such a queue store their key (the
-- unkeyed partition is ''); every other run keeps NULL and pays only the triggers'
-- WHEN test below.
ALTER TABLE {schema}.runlane_runs ADD COLUMN IF NOT EXISTS rate_key TEXT;

-- A key's waiting runs by due time: its earliest (due_at below) is the first entry.
CREATE INDEX IF NOT EXISTS runlane_runs_rate_keyed
    ON {schema}.runlane_runs (environment, queue, rate_key, run_at, id)
    WHERE rate_key IS NOT NULL
      AND status IN ('queued', 'scheduled', 'retrying', 'released');

-- The same runs in claim order (run_at - priority_offset, migration 015), for the
-- claim that has a token of the key: an ordered scan that stops at its tokens. A
-- second index because neither order gives the other's first entry, and only runs
-- with a rate key pay it.
CREATE INDEX IF NOT EXISTS runlane_runs_rate_claim_order
    ON {schema}.runlane_runs (environment, queue, rate_key, (run_at - priority_offset), id)
    WHERE rate_key IS NOT NULL
      AND status IN ('queued', 'scheduled', 'retrying', 'released');

-- Each partition's row tells a claim when the partition is worth a look, so that a
-- claim reads only partitions with both a token and a due run, however many others
-- are exhausted or idle (no head-of-line blocking, and a claim time that does not
-- grow with the number of keys):
--   token_at: when its next token comes (tat minus the tolerance of the limit the
--     last claimer applied; a claim checks the tokens again with its own limit);
--   due_at: never later than the earliest run_at of its waiting runs (the largest
--     bigint when it has none); runs entering a waiting status lower it (the
--     trigger below), a claimer raises it again from the runs themselves;
--   ready_at: the later of the two, indexed;
--   version: counts the trigger's writes: a claimer raises due_at only when the
--     version it read is still there, so a run committed after its snapshot is
--     never hidden behind a due_at computed without it.
ALTER TABLE {schema}.runlane_rate_limits
    ADD COLUMN IF NOT EXISTS token_at BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS due_at BIGINT NOT NULL DEFAULT 9223372036854775807,
    ADD COLUMN IF NOT EXISTS ready_at BIGINT NOT NULL DEFAULT 9223372036854775807,
    ADD COLUMN IF NOT EXISTS version BIGINT NOT NULL DEFAULT 0;

CREATE INDEX IF NOT EXISTS runlane_rate_limits_ready
    ON {schema}.runlane_rate_limits (environment, queue, ready_at);

CREATE OR REPLACE FUNCTION {schema}.runlane_rate_key_waiting() RETURNS trigger
LANGUAGE plpgsql AS $body$
BEGIN
    INSERT INTO {schema}.runlane_rate_limits AS p (
        environment, queue, rate_key, tat, token_at, due_at, ready_at, version
    ) VALUES (NEW.environment, NEW.queue, NEW.rate_key, 0, 0, NEW.run_at, NEW.run_at, 1)
    ON CONFLICT (environment, queue, rate_key) DO UPDATE
    SET due_at = least(p.due_at, excluded.due_at),
        ready_at = greatest(p.token_at, least(p.due_at, excluded.due_at)),
        version = p.version + 1;
    RETURN NULL;
END
$body$;

DROP TRIGGER IF EXISTS runlane_rate_key_run_created ON {schema}.runlane_runs;
CREATE TRIGGER runlane_rate_key_run_created
AFTER INSERT ON {schema}.runlane_runs
FOR EACH ROW
WHEN (NEW.rate_key IS NOT NULL
      AND NEW.status IN ('queued', 'scheduled', 'retrying', 'released'))
EXECUTE FUNCTION {schema}.runlane_rate_key_waiting();

DROP TRIGGER IF EXISTS runlane_rate_key_run_waiting ON {schema}.runlane_runs;
CREATE TRIGGER runlane_rate_key_run_waiting
AFTER UPDATE OF status, run_at ON {schema}.runlane_runs
FOR EACH ROW
WHEN (NEW.rate_key IS NOT NULL
      AND NEW.status IN ('queued', 'scheduled', 'retrying', 'released'))
EXECUTE FUNCTION {schema}.runlane_rate_key_waiting();
