-- Topics (contract 5): published messages, deduplication entries, and what a
-- delivery run stores beside an ordinary run. Task runs keep NULL / 0 in the new
-- run columns.
ALTER TABLE {schema}.runlane_runs ADD COLUMN IF NOT EXISTS partition_key TEXT;
ALTER TABLE {schema}.runlane_runs ADD COLUMN IF NOT EXISTS replays INTEGER NOT NULL DEFAULT 0;
ALTER TABLE {schema}.runlane_runs ADD COLUMN IF NOT EXISTS subscription_mode TEXT;
ALTER TABLE {schema}.runlane_runs ADD COLUMN IF NOT EXISTS message_sequence BIGINT;
ALTER TABLE {schema}.runlane_runs ADD COLUMN IF NOT EXISTS dead_letter_reason TEXT;
ALTER TABLE {schema}.runlane_runs ADD COLUMN IF NOT EXISTS dead_lettered_at BIGINT;

-- Unfinished deliveries of one (subscription, key) by sequence: an ORDERED key's
-- head is the first row, and an EXCLUSIVE key's lease holders are among them.
CREATE INDEX IF NOT EXISTS runlane_runs_keyed
    ON {schema}.runlane_runs (environment, task_id, partition_key, message_sequence)
    WHERE partition_key IS NOT NULL
      AND status IN ('queued', 'scheduled', 'retrying', 'released', 'running',
                     'cancellation_requested', 'dead_lettered');

-- Dead letters, oldest first.
CREATE INDEX IF NOT EXISTS runlane_runs_dead_lettered
    ON {schema}.runlane_runs (environment, dead_lettered_at, id)
    WHERE status = 'dead_lettered';

-- A message's deliveries (duplicate receipts, and pruning messages left without runs).
CREATE INDEX IF NOT EXISTS runlane_runs_message
    ON {schema}.runlane_runs (environment, message_sequence)
    WHERE message_sequence IS NOT NULL;

-- Deliveries per subscription and status.
CREATE INDEX IF NOT EXISTS runlane_runs_deliveries
    ON {schema}.runlane_runs (environment, task_id, status)
    WHERE subscription_mode IS NOT NULL;

-- Pruning scans finished runs by age; discarded dead letters are finished too.
DROP INDEX IF EXISTS {schema}.runlane_runs_finished;
CREATE INDEX IF NOT EXISTS runlane_runs_finished
    ON {schema}.runlane_runs (environment, updated_at)
    WHERE status IN ('succeeded', 'failed', 'cancelled', 'discarded');

-- Each message once per environment. window_ends_at: the end of its topic's
-- deduplication window; the row is kept at least until then. envelope: topic,
-- payload and attributes as canonical JSON, what a reused message id is compared by.
-- The payload is json (its text as written), as for runs.
CREATE TABLE IF NOT EXISTS {schema}.runlane_messages (
    environment    TEXT   NOT NULL,
    id             TEXT   COLLATE "C" NOT NULL,
    topic          TEXT   NOT NULL,
    payload        JSON   NOT NULL,
    attributes     JSONB  NOT NULL,
    envelope       TEXT   NOT NULL,
    published_at   BIGINT NOT NULL,
    window_ends_at BIGINT NOT NULL,
    trace_carrier  JSONB,
    sequence       BIGINT NOT NULL,
    PRIMARY KEY (id, environment)
);

CREATE UNIQUE INDEX IF NOT EXISTS runlane_messages_sequence
    ON {schema}.runlane_messages (environment, sequence);

CREATE INDEX IF NOT EXISTS runlane_messages_window
    ON {schema}.runlane_messages (environment, window_ends_at);

-- Sequences are drawn after the publish took its (subscription, key) locks, so
-- for one key sequence order is commit order. Unique and increasing across
-- environments, hence within each.
CREATE SEQUENCE IF NOT EXISTS {schema}.runlane_message_sequence AS BIGINT;

-- A deduplication key holds its message until expires_at (published_at plus the
-- topic's window); an expired entry is replaced in place or released by tick.
CREATE TABLE IF NOT EXISTS {schema}.runlane_deduplication_keys (
    environment  TEXT   NOT NULL,
    topic        TEXT   NOT NULL,
    key          TEXT   NOT NULL,
    message_id   TEXT   COLLATE "C" NOT NULL,
    published_at BIGINT NOT NULL,
    expires_at   BIGINT NOT NULL,
    PRIMARY KEY (environment, topic, key)
);

CREATE INDEX IF NOT EXISTS runlane_deduplication_keys_expiry
    ON {schema}.runlane_deduplication_keys (environment, expires_at);
