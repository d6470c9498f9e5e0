-- The settle statement (apply_finishing_transitions, transitions.sql) announces the
-- runs it finishes itself, once per statement, and names their environment in the
-- transaction-local setting runlane.announced once its notification is queued. The
-- trigger of migration 012 stays for every other statement that finishes runs (and
-- SQL of an application's own) but skips the rows of an environment already
-- announced in the transaction: an AFTER trigger's WHEN clause is tested as each row
-- is written, and a skipped row queues no trigger call, the ~22,000 instructions a
-- settled run paid for a notification PostgreSQL folded into one anyway.
-- PostgreSQL reads a trigger's WHEN clause afresh for every statement that writes the
-- column (claims too): the test of the old status gives way to the setting's, so a
-- claim of one run pays about 13,000 instructions more, not 28,000 (callgrind, this
-- clause against both tests). A terminal run takes no transition, so a row
-- written terminal has become so; SQL of one's own that rewrites a finished run's
-- status now announces it again, which only makes its waiters re-read.
DROP TRIGGER IF EXISTS runlane_runs_finished ON {schema}.runlane_runs;
CREATE TRIGGER runlane_runs_finished
    AFTER UPDATE OF status ON {schema}.runlane_runs
    FOR EACH ROW
    WHEN (NEW.status IN ('succeeded', 'failed', 'cancelled', 'discarded')
          AND current_setting('runlane.announced', true) IS DISTINCT FROM NEW.environment)
    EXECUTE FUNCTION {schema}.runlane_announce_finished();
