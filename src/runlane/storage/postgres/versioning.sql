-- Migrations: which are applied, and recording them.
-- Parameters are %(named)s; {schema} is the quoted schema name.

-- name: lock_migrations
-- Serialises migrate() across processes until its transaction ends.
SELECT pg_advisory_xact_lock(hashtext(%(lock_name)s));

-- name: create_schema
CREATE SCHEMA IF NOT EXISTS {schema};

-- name: create_migrations_table
CREATE TABLE IF NOT EXISTS {schema}.runlane_migrations (
    version    INTEGER PRIMARY KEY,
    name       TEXT    NOT NULL,
    applied_at BIGINT  NOT NULL
);

-- name: applied_migrations
SELECT version FROM {schema}.runlane_migrations ORDER BY version;

-- name: record_migration
INSERT INTO {schema}.runlane_migrations (version, name, applied_at)
VALUES (%(version)s, %(name)s, %(applied_at)s);

-- name: schema_version
SELECT coalesce(max(version), 0) AS version FROM {schema}.runlane_migrations;

-- name: missing_indexes
-- Which of the indexes named (versioning.DELIVERY_INDEXES) the schema lacks.
SELECT i.name FROM unnest(%(names)s::text[]) AS i(name)
WHERE to_regclass(%(schema)s || '.' || i.name) IS NULL;
