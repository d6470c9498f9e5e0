-- The insert trigger of migration 016 tests only the rate key: PostgreSQL compiles a
-- trigger's WHEN clause for every statement that writes the table, and every lone
-- trigger paid for the status list it held. Runs are rarely written with a rate key
-- and not waiting (run_now leases them), so the function tests the status itself.
CREATE OR REPLACE FUNCTION {schema}.runlane_rate_key_waiting() RETURNS trigger
LANGUAGE plpgsql AS $body$
BEGIN
    IF NEW.status NOT IN ('queued', 'scheduled', 'retrying', 'released') THEN
        RETURN NULL;
    END IF;
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
WHEN (NEW.rate_key IS NOT NULL)
EXECUTE FUNCTION {schema}.runlane_rate_key_waiting();
