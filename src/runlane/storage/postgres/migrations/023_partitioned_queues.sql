-- A bounded queue's claim ranked every due run of the queue per partition (concurrency
-- key), however few it could take: with a backlog of 100,000 runs each claim read them
-- all. Most bounded queues never see a concurrency key: their runs are one partition,
-- and the first runs in claim order, as many as the limit, are all a claim can take.
-- This table names the queues that have held a run with a concurrency key; the claim
-- ranks all due runs only for those, and reads at most the limit of the others from
-- runlane_runs_claim_order. A queue is named in the transaction that writes its first
-- keyed run (insert_runs, or name_partitioned_queues after a COPY), so a claim that
-- sees the run sees the name. Names are never removed: a queue keyed once keeps the
-- ranking claim.
CREATE TABLE {schema}.runlane_partitioned_queues (
    environment TEXT NOT NULL,
    queue TEXT NOT NULL,
    PRIMARY KEY (environment, queue)
);

INSERT INTO {schema}.runlane_partitioned_queues (environment, queue)
SELECT DISTINCT environment, queue
FROM {schema}.runlane_runs
WHERE concurrency_key IS NOT NULL;
