"""Schema versions: every migration the file has not seen, applied once, in order."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator

from runlane.storage.sql.queryfiles import load_migrations
from runlane.storage.sqlite.queries import QUERIES

_MIGRATIONS = load_migrations("runlane.storage.sqlite.migrations")


def apply_migrations(cur: sqlite3.Cursor) -> list[str]:
    """Create or upgrade the schema inside ``cur``'s transaction; return what was applied."""
    applied: list[str] = []
    cur.execute(QUERIES["create_migrations_table"])
    done = {row[0] for row in cur.execute(QUERIES["applied_migrations"])}
    for version, name, sql in _MIGRATIONS:
        if version in done:
            continue
        for statement in _split_statements(sql):
            cur.execute(statement)
        cur.execute(QUERIES["record_migration"], (version, name))
        applied.append(f"{version:03d}_{name}")
    return applied


#: The index of tick's requests for deliveries (``undelivered_runs``), which a lane with
#: a transport creates on open (migration 010 took it out of the schema). Once created it
#: stays: a process of a lane without a transport on the same file leaves it alone.
DELIVERY_INDEX = """
CREATE INDEX IF NOT EXISTS runlane_runs_undelivered
    ON runlane_runs (environment, queue, run_at)
    WHERE delivery_requested_at IS NULL
      AND (status = 'queued' OR status = 'scheduled' OR status = 'retrying'
           OR status = 'released')
"""


def apply_migrations_for(cur: sqlite3.Cursor, *, deliveries: bool) -> list[str]:
    """:func:`apply_migrations`, then the delivery index when ``deliveries`` (the lane
    has a transport)."""
    applied = apply_migrations(cur)
    if deliveries:
        cur.execute(DELIVERY_INDEX)
    return applied


def _split_statements(sql: str) -> list[str]:
    return [s.strip() for s in sqlite3_statements(sql) if s.strip()]


def sqlite3_statements(sql: str) -> Iterator[str]:
    """Split a migration into statements (ours hold no ';' inside literals)."""
    buffer = ""
    for line in sql.splitlines(keepends=True):
        if line.lstrip().startswith("--"):
            continue
        buffer += line
        if sqlite3.complete_statement(buffer):
            yield buffer
            buffer = ""
    if buffer.strip():
        yield buffer
