-- A bounded queue's claim ranked every due run of the queue per partition (concurrency
-- key), however few it could take: with a backlog of 100,000 runs each claim read them
-- all. Most bounded queues never see a concurrency key: their runs are one partition,
-- and the first runs in claim order, as many as the limit, are all a claim can take.
-- This table names the queues that have held a run with a concurrency key; the claim
-- ranks all due runs only for those, and reads at most the limit of the others. The
-- driver names a queue in the transaction that writes its first keyed run (a trigger
-- would cost every plain row of a bulk insert about a sixth more). Names are never
-- removed: a queue keyed once keeps the ranking claim. (PostgreSQL: 023.)
CREATE TABLE runlane_partitioned_queues (
    environment TEXT NOT NULL,
    queue TEXT NOT NULL,
    PRIMARY KEY (environment, queue)
) WITHOUT ROWID;

INSERT OR IGNORE INTO runlane_partitioned_queues (environment, queue)
SELECT DISTINCT environment, queue FROM runlane_runs WHERE concurrency_key IS NOT NULL;
