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
