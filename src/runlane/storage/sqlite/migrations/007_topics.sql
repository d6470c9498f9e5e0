-- Topics (contract 5): published messages, deduplication entries, and what a
-- delivery run stores beside an ordinary run. Task runs keep NULL / 0 in the new
-- run columns.
ALTER TABLE runlane_runs ADD COLUMN partition_key TEXT;
ALTER TABLE runlane_runs ADD COLUMN replays INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runlane_runs ADD COLUMN subscription_mode TEXT;
ALTER TABLE runlane_runs ADD COLUMN message_sequence INTEGER;
ALTER TABLE runlane_runs ADD COLUMN dead_letter_reason TEXT;
ALTER TABLE runlane_runs ADD COLUMN dead_lettered_at INTEGER;

-- Unfinished deliveries of one (subscription, key) by sequence: an ORDERED key's
-- head is the first row, and an EXCLUSIVE key's lease holders are among them.
CREATE INDEX IF NOT EXISTS runlane_runs_keyed
    ON runlane_runs (environment, task_id, partition_key, message_sequence)
    WHERE partition_key IS NOT NULL
      AND status IN ('queued', 'scheduled', 'retrying', 'released', 'running',
                     'cancellation_requested', 'dead_lettered');

-- Dead letters, oldest first.
CREATE INDEX IF NOT EXISTS runlane_runs_dead_lettered
    ON runlane_runs (environment, dead_lettered_at, id)
    WHERE status = 'dead_lettered';

-- A message's deliveries (duplicate receipts, and pruning messages left without runs).
CREATE INDEX IF NOT EXISTS runlane_runs_message
    ON runlane_runs (environment, message_sequence)
    WHERE message_sequence IS NOT NULL;

-- Deliveries per subscription and status.
CREATE INDEX IF NOT EXISTS runlane_runs_deliveries
    ON runlane_runs (environment, task_id, status)
    WHERE subscription_mode IS NOT NULL;

-- Pruning scans finished runs by age; discarded dead letters are finished too.
DROP INDEX IF EXISTS runlane_runs_finished;
CREATE INDEX IF NOT EXISTS runlane_runs_finished
    ON runlane_runs (environment, updated_at)
    WHERE status IN ('succeeded', 'failed', 'cancelled', 'discarded');

-- Each message once per environment. window_ends_at: the end of its topic's
-- deduplication window; the row is kept at least until then. envelope: topic,
-- payload and attributes as canonical JSON, what a reused message id is compared by.
CREATE TABLE IF NOT EXISTS runlane_messages (
    environment    TEXT    NOT NULL,
    id             TEXT    NOT NULL,
    topic          TEXT    NOT NULL,
    payload        TEXT    NOT NULL,
    attributes     TEXT    NOT NULL,
    envelope       TEXT    NOT NULL,
    published_at   INTEGER NOT NULL,
    window_ends_at INTEGER NOT NULL,
    trace_carrier  TEXT,
    sequence       INTEGER NOT NULL,
    PRIMARY KEY (environment, id)
) WITHOUT ROWID;

CREATE UNIQUE INDEX IF NOT EXISTS runlane_messages_sequence
    ON runlane_messages (environment, sequence);

CREATE INDEX IF NOT EXISTS runlane_messages_window
    ON runlane_messages (environment, window_ends_at);

-- The last sequence drawn per environment (SQLite writers are serialised, so
-- drawing in the publish transaction makes sequence order commit order).
CREATE TABLE IF NOT EXISTS runlane_message_sequences (
    environment   TEXT    NOT NULL PRIMARY KEY,
    last_sequence INTEGER NOT NULL
) WITHOUT ROWID;

-- A deduplication key holds its message until expires_at (published_at plus the
-- topic's window); an expired entry is replaced in place or released by tick.
CREATE TABLE IF NOT EXISTS runlane_deduplication_keys (
    environment  TEXT    NOT NULL,
    topic        TEXT    NOT NULL,
    key          TEXT    NOT NULL,
    message_id   TEXT    NOT NULL,
    published_at INTEGER NOT NULL,
    expires_at   INTEGER NOT NULL,
    PRIMARY KEY (environment, topic, key)
) WITHOUT ROWID;

CREATE INDEX IF NOT EXISTS runlane_deduplication_keys_expiry
    ON runlane_deduplication_keys (environment, expires_at);
