"""Versioned migrations, applied on request only, and the version check on open."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg import errors as pg_errors

from runlane.storage.postgres.errors import missing_schema
from runlane.storage.sql.queryfiles import load_migrations
from runlane.types.clock import to_micros
from runlane.types.errors import ErrorCode, RunlaneError

Migration = tuple[int, str, str]

#: ``(version, name, sql)`` of every migration, ``{schema}`` not yet filled in.
MIGRATIONS: list[Migration] = load_migrations("runlane.storage.postgres.migrations")
#: The schema version this code needs.
SCHEMA_VERSION = max(version for version, _, _ in MIGRATIONS)

#: The indexes of a lane with a transport, which :func:`apply_migrations` creates for
#: such a lane (migration 020 took them out of the schema: without a transport no run
#: needs them, yet each write of a run paid for them). ``undelivered``: tick's
#: requests for deliveries (``undelivered_runs``), an entry per waiting run;
#: ``reserved``: the dispatch reservations tick expires. Once created they stay.
DELIVERY_INDEXES: dict[str, str] = {
    "runlane_runs_undelivered": """
CREATE INDEX IF NOT EXISTS runlane_runs_undelivered
    ON {schema}.runlane_runs (environment, queue, run_at, id)
    WHERE delivery_requested_at IS NULL
      AND status IN ('queued', 'scheduled', 'retrying', 'released')
""",
    "runlane_runs_reserved": """
CREATE INDEX IF NOT EXISTS runlane_runs_reserved
    ON {schema}.runlane_runs (environment, reserved_until)
    WHERE reserved_until IS NOT NULL
""",
}


async def apply_migrations(
    conn: psycopg.AsyncConnection[Any], q: Mapping[str, str], schema: str,
    migrations: Sequence[Migration], *, deliveries: bool,
) -> list[str]:  # fmt: skip
    """Apply what is missing in one transaction; concurrent callers wait for each other.

    The advisory lock is taken first, so a second process sees the first one's
    work once it gets the lock and applies nothing. ``deliveries`` (the lane has a
    transport): the :data:`DELIVERY_INDEXES` it lacks too (not migrations: not among
    the names returned, as on SQLite).
    """
    applied: list[str] = []
    async with conn.transaction():
        await conn.execute(q["lock_migrations"], {"lock_name": f"runlane.migrate:{schema}"})
        await conn.execute(q["create_schema"])
        await conn.execute(q["create_migrations_table"])
        cur = await conn.execute(q["applied_migrations"])
        done = {row[0] for row in await cur.fetchall()}
        for version, name, sql in migrations:
            if version in done:
                continue
            # Without parameters psycopg sends the text as one simple query, so a
            # migration may hold several statements.
            await conn.execute(sql.encode())
            await conn.execute(
                q["record_migration"],
                {"version": version, "name": name, "applied_at": to_micros(datetime.now(UTC))},
            )
            applied.append(f"{version:03d}_{name}")
        if deliveries:
            # Each checked first: CREATE INDEX IF NOT EXISTS would take the table's
            # share lock, waiting for every writer, only to find the index there.
            for name in await missing_delivery_indexes(conn, q, schema):
                await conn.execute(DELIVERY_INDEXES[name].replace("{schema}", f'"{schema}"'))
    return applied


async def missing_delivery_indexes(
    conn: psycopg.AsyncConnection[Any], q: Mapping[str, str], schema: str
) -> list[str]:
    """The :data:`DELIVERY_INDEXES` the schema lacks (see :meth:`PostgresStorage.open`)."""
    cur = await conn.execute(
        q["missing_indexes"], {"names": list(DELIVERY_INDEXES), "schema": f'"{schema}"'}
    )
    return [row[0] for row in await cur.fetchall()]


async def check_version(
    conn: psycopg.AsyncConnection[Any], q: Mapping[str, str], schema: str, meta: dict[str, Any]
) -> None:
    """Refuse a missing or older schema with what to do about it."""
    try:
        cur = await conn.execute(q["schema_version"])
        row = await cur.fetchone()
    except (pg_errors.UndefinedTable, pg_errors.InvalidSchemaName):
        raise missing_schema(schema, meta) from None
    version = int(row[0]) if row is not None else 0
    if version == 0:
        raise missing_schema(schema, meta)
    if version < SCHEMA_VERSION:
        raise RunlaneError(
            ErrorCode.CONFIGURATION_INVALID,
            f"the runlane schema {schema!r} is at version {version} but this code needs "
            f"{SCHEMA_VERSION}; run `runlane migrate` (or `await rl.migrate()`).",
            meta={**meta, "schema": schema, "found": version, "required": SCHEMA_VERSION},
        )
