-- Migrations: which are applied, and recording them.
-- The ledger's (version, name) parameters are positional.

-- name: create_migrations_table
CREATE TABLE IF NOT EXISTS runlane_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL);

-- name: applied_migrations
SELECT version FROM runlane_migrations;

-- name: record_migration
INSERT INTO runlane_migrations VALUES (?, ?, strftime('%s','now') * 1000000);
