"""At ``synchronous=FULL`` (each commit waits for the disk) an overlapping SQLite
transaction (a busy worker's settles) is written on the event loop
and committed in the connection's thread: the loop goes on while the WAL file syncs,
and the connection is used by nothing else until the commit has ended, even when the
caller is cancelled meanwhile. Other transactions commit inline."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from runlane.storage.sqlite.connections import SqliteConnection


@pytest.fixture(params=["NORMAL", "FULL"])
async def db(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[SqliteConnection]:
    conn = SqliteConnection(
        str(tmp_path / "synced.db"), busy_timeout_ms=1_000, synchronous=request.param
    )
    await conn.connect()
    await conn.transact(lambda cur: cur.execute("CREATE TABLE t (x INTEGER)"))
    yield conn
    await conn.close()


def _stored(db: SqliteConnection) -> list[int]:
    reader = sqlite3.connect(db.path)
    try:
        return [row[0] for row in reader.execute("SELECT x FROM t ORDER BY x")]
    finally:
        reader.close()


async def test_the_loop_runs_while_a_synced_commit_waits_for_the_disk(
    db: SqliteConnection,
) -> None:
    loop = asyncio.get_running_loop()
    ran: list[str] = []

    def write(cur: sqlite3.Cursor) -> str:
        cur.execute("INSERT INTO t VALUES (1)")
        loop.call_soon(ran.append, "loop")
        return "written"

    assert await db.transact(write, overlap=True) == "written"
    # NORMAL commits inline, so the loop had no turn; FULL commits in the thread.
    assert ran == (["loop"] if db._synchronous == "FULL" else [])
    assert _stored(db) == [1]
    ran.clear()
    assert await db.transact(write) == "written"
    assert ran == []  # not overlapping: committed inline whatever the setting
    assert _stored(db) == [1, 1]


async def test_a_caller_cancelled_during_the_commit_leaves_it_whole(tmp_path: Path) -> None:
    db = SqliteConnection(str(tmp_path / "synced.db"), busy_timeout_ms=1_000, synchronous="FULL")
    await db.connect()
    try:
        await db.transact(lambda cur: cur.execute("CREATE TABLE t (x INTEGER)"))
        loop = asyncio.get_running_loop()
        # Hold the connection's thread, so the commit is still to come when the
        # cancellation arrives.
        gate = threading.Event()
        held = loop.run_in_executor(db._executor, gate.wait)
        writing: asyncio.Future[None] | None = None

        def write(cur: sqlite3.Cursor) -> None:
            cur.execute("INSERT INTO t VALUES (2)")
            assert writing is not None
            loop.call_soon(writing.cancel)
            loop.call_later(0.05, gate.set)

        writing = asyncio.ensure_future(db.transact(write, overlap=True))
        with pytest.raises(asyncio.CancelledError):
            await writing
        # The cancelled caller gave the connection back only once its commit had
        # ended: the next transaction starts cleanly and both rows are stored.
        await db.transact(lambda cur: cur.execute("INSERT INTO t VALUES (3)"))
        await held
        assert _stored(db) == [2, 3]
    finally:
        await db.close()


async def test_a_commit_that_fails_rolls_back_and_raises(db: SqliteConnection) -> None:
    def schema(cur: sqlite3.Cursor) -> None:
        cur.execute("CREATE TABLE parent (id INTEGER PRIMARY KEY)")
        cur.execute(
            "CREATE TABLE child (parent_id INTEGER REFERENCES parent (id)"
            " DEFERRABLE INITIALLY DEFERRED)"
        )

    await db.transact(schema)
    # A deferred foreign key is checked at COMMIT, so the commit itself fails.
    await db.run(lambda: db._require().execute("PRAGMA foreign_keys = ON"))

    def orphan(cur: sqlite3.Cursor) -> None:
        cur.execute("INSERT INTO t VALUES (4)")
        cur.execute("INSERT INTO child VALUES (7)")

    for overlap in (False, True):
        with pytest.raises(sqlite3.IntegrityError):
            await db.transact(orphan, overlap=overlap)
        assert _stored(db) == []
    await db.transact(lambda cur: cur.execute("INSERT INTO t VALUES (5)"))
    assert _stored(db) == [5]
