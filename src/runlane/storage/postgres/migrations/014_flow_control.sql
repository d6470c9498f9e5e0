-- Paused queues (flow control, 7.3): one row per paused queue of an environment.
-- Workers read the whole table once per poll interval and leave its queues out of
-- their claims; resuming deletes the row. Times are microseconds since the epoch.
CREATE TABLE {schema}.runlane_queue_pauses (
    environment TEXT NOT NULL,
    queue TEXT NOT NULL,
    paused_at BIGINT NOT NULL,
    reason TEXT,
    PRIMARY KEY (environment, queue)
);

-- Rate limits (flow control, 7.1): one small state per partition, its GCRA
-- theoretical arrival time tat (microseconds; runlane.model.rate_limiting). A claim
-- that starts runs of a rate-limited queue moves it forward in the transaction that
-- leases them, under the queue's capacity lock. rate_key is '' for a queue limited as
-- a whole.
CREATE TABLE {schema}.runlane_rate_limits (
    environment TEXT NOT NULL,
    queue TEXT NOT NULL,
    rate_key TEXT NOT NULL,
    tat BIGINT NOT NULL,
    PRIMARY KEY (environment, queue, rate_key)
);
