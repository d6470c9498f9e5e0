-- Idle workers standing by for a hand-off. A worker that found nothing to claim
-- offers its free slots here before it waits; a lone trigger of a due run on one of
-- its queues takes a slot in its own statement and writes the run already leased to
-- that worker (run.started included), then notifies it with the run. The run then
-- starts after one commit, the trigger's, instead of the trigger's and a claim's.
--
-- UNLOGGED: an offer is worth nothing after a server crash (every listening
-- connection is gone with it), and a transaction that writes only unlogged tables
-- does not wait for the WAL to reach the disk, so standing by and down costs no
-- flush. A worker's listening connection holds the session advisory lock lock_key
-- while it listens: a trigger hands off only to an offer whose lock is held, so the
-- offer of a worker whose process or connection died is never taken.
CREATE UNLOGGED TABLE {schema}.runlane_standby (
    environment TEXT NOT NULL,
    -- The fencing token of every run handed to this offer; also names the offer.
    lease_token TEXT NOT NULL,
    -- The lease owner (a worker's id need not be unique across processes).
    worker_id TEXT NOT NULL,
    -- The queues it claims from that have no concurrency limit.
    queues TEXT[] NOT NULL,
    -- Slots it offers; each hand-off takes one and appends its run to handed.
    free INTEGER NOT NULL,
    handed TEXT[] NOT NULL DEFAULT '{}',
    lease_micros BIGINT NOT NULL,
    -- Where its listening connection hears hand-offs, and the lock that connection holds.
    channel TEXT NOT NULL,
    lock_key BIGINT NOT NULL,
    PRIMARY KEY (environment, lease_token)
);
