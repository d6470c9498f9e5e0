"""The spare connection: a lone caller skips the pool, and a spare the server ended,
or a call cancelled mid-statement, is dropped and replaced, never reused."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import psycopg
import pytest

from runlane import Context, Runlane, RunlaneError, postgres_lane, queue, task
from runlane.storage.postgres import bare
from runlane.storage.postgres.bare import BareStatement
from runlane.storage.postgres.connections import SpareConnection
from runlane.storage.postgres.driver import PostgresStorage
from runlane.storage.postgres.sessions import DriverConnection


@task("noop")
async def noop(payload: Any, ctx: Context) -> None:
    return None


def _runtime(dsn: str, environment: str) -> Runlane:
    return Runlane(
        lane=postgres_lane(dsn),
        queues=[queue("main", default=True)],
        tasks=[noop],
        environment=environment,
    )


async def _migrated(dsn: str, environment: str) -> Runlane:
    rl = _runtime(dsn, environment)
    await rl.migrate()
    return rl


def _pool_requests(rl: Runlane) -> int:
    storage = rl.storage
    assert isinstance(storage, PostgresStorage)
    assert storage._db.pool is not None
    return int(storage._db.pool.get_stats().get("requests_num", 0))


def _spare(rl: Runlane) -> SpareConnection:
    storage = rl.storage
    assert isinstance(storage, PostgresStorage)
    assert storage._db.spare is not None
    return storage._db.spare


async def _until_spare_is_open(rl: Runlane) -> psycopg.AsyncConnection[Any]:
    spare = _spare(rl)
    for _ in range(500):
        conn = spare.take()
        if conn is not None:
            spare.give_back(conn)
            return conn
        await asyncio.sleep(0.01)
    raise AssertionError("the spare connection never opened")


@asynccontextmanager
async def _spare_ready(
    dsn: str, environment: str
) -> AsyncIterator[tuple[Runlane, DriverConnection]]:
    """A migrated runtime whose spare connection is open (one trigger asked for it)."""
    async with await _migrated(dsn, environment) as rl:
        await rl.trigger(noop, {})
        conn = await _until_spare_is_open(rl)
        assert isinstance(conn, DriverConnection)
        yield rl, conn


async def test_a_lone_producer_triggers_on_the_spare_not_the_pool(
    postgres_dsn: str, environment: str
) -> None:
    async with _spare_ready(postgres_dsn, environment) as (rl, _):
        before = _pool_requests(rl)
        runs = [await rl.trigger(noop, {"i": i}) for i in range(20)]
        assert _pool_requests(rl) == before
        assert len({run.id for run in runs}) == 20
        listed = await rl.runs.list(limit=100)
        assert len(listed.data) == 21


async def test_lone_triggers_go_bare_and_a_refused_statement_leaves_the_spare_usable(
    postgres_dsn: str, environment: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with _spare_ready(postgres_dsn, environment) as (rl, conn):
        await rl.trigger(noop, {})  # its statement is prepared from here on
        made: list[object] = []
        make = conn.cursor

        def counting(*args: Any, **kwargs: Any) -> Any:
            made.append(args)
            return make(*args, **kwargs)

        monkeypatch.setattr(conn, "cursor", counting)
        for i in range(5):
            await rl.trigger(noop, {"i": i})
        assert made == []  # sent through libpq: no cursor
        storage = rl.storage
        assert isinstance(storage, PostgresStorage)
        # A bare statement the server refuses raises as a cursor's would, typed, and
        # leaves the connection usable.
        divide = BareStatement.from_query("divide", "SELECT 1 / %(n)s")

        async def refused(c: DriverConnection) -> object:
            return await c.execute_bare(divide, {"n": 0})

        with pytest.raises(RunlaneError):
            await storage._db.run(refused)
        # So does one on the kept cursor (a count).
        storage._q = {**storage._q, "divide": "SELECT 1 / 0"}
        with pytest.raises(RunlaneError):
            await storage._count("divide", {})
        await rl.trigger(noop, {"after": True})
        assert await _until_spare_is_open(rl) is conn
        assert len(made) == 1  # the count's kept cursor, made once
        assert len((await rl.runs.list(limit=100)).data) == 8


async def test_a_bare_statement_is_prepared_again_when_the_session_lost_it(
    postgres_dsn: str, environment: str
) -> None:
    async with _spare_ready(postgres_dsn, environment) as (rl, conn):
        await rl.trigger(noop, {})
        await conn.execute("DEALLOCATE ALL")
        await rl.trigger(noop, {"after": True})
        assert await _until_spare_is_open(rl) is conn
        assert len((await rl.runs.list(limit=100)).data) == 3


async def test_a_bare_statement_cancelled_mid_flight_drops_the_spare(
    postgres_dsn: str, environment: str
) -> None:
    async with _spare_ready(postgres_dsn, environment) as (rl, conn):
        storage = rl.storage
        assert isinstance(storage, PostgresStorage)
        sleep = BareStatement.from_query("sleep", "SELECT pg_sleep(%(seconds)s)")

        async def slow(c: DriverConnection) -> object:
            return await c.execute_bare(sleep, {"seconds": 5})

        call = asyncio.create_task(storage._db.run(slow))
        await asyncio.sleep(0.2)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        # The statement may still be running on it: never handed out again.
        assert await _until_spare_is_open(rl) is not conn
        await rl.trigger(noop, {"after": True})
        assert len((await rl.runs.list(limit=10)).data) == 2


async def test_a_lone_trigger_of_a_large_payload_goes_bare_whole(
    postgres_dsn: str, environment: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    big = {"text": "é" * 120_000, "n": list(range(2_000))}
    waits: list[bool] = []
    ready = bare._ready

    async def counted(loop: asyncio.AbstractEventLoop, fd: int, *, write: bool) -> bool:
        waits.append(write)
        return await ready(loop, fd, write=write)

    monkeypatch.setattr(bare, "_ready", counted)
    async with _spare_ready(postgres_dsn, environment) as (rl, conn):
        # The spare's first trigger prepares the statement; the later ones go bare.
        await rl.trigger(noop, {})
        # A send buffer far smaller than the statement, and a server that reads nothing
        # for a moment (its backend stopped; a backend reading as fast as libpq sends
        # could take it all without a wait): libpq cannot send it at once, so the call
        # waits for the socket to take the rest.
        with socket.socket(fileno=os.dup(conn.pgconn.socket)) as shared:
            shared.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        # (Only a cluster of this session's own runs on this host, with pids to signal.)
        backend = None if os.environ.get("RUNLANE_TEST_DATABASE_URL") else conn.info.backend_pid
        if backend is not None:
            os.kill(backend, signal.SIGSTOP)
            asyncio.get_running_loop().call_later(0.3, os.kill, backend, signal.SIGCONT)
        try:
            run = await rl.trigger(noop, big)
        finally:
            if backend is not None:
                os.kill(backend, signal.SIGCONT)
        assert True in waits
        stored = await rl.runs.get(run.id)
        assert stored is not None and stored.payload == big


async def test_concurrent_callers_use_the_pool_beside_the_spare(
    postgres_dsn: str, environment: str
) -> None:
    async with _spare_ready(postgres_dsn, environment) as (rl, _):
        before = _pool_requests(rl)
        # Separate writes (trigger_many of one run each) that overlap in time.
        await asyncio.gather(*(rl.trigger_many(noop, [{"i": i}]) for i in range(10)))
        assert _pool_requests(rl) > before
        assert len((await rl.runs.list(limit=100)).data) == 11


async def test_a_spare_the_server_ended_is_replaced_and_no_call_fails(
    postgres_dsn: str, environment: str
) -> None:
    async with _spare_ready(postgres_dsn, environment) as (rl, ended):
        async with await psycopg.AsyncConnection.connect(postgres_dsn, autocommit=True) as admin:
            await admin.execute("SELECT pg_terminate_backend(%s)", [ended.info.backend_pid])
        await asyncio.sleep(0.2)  # the termination notice reaches the spare's socket
        await rl.trigger(noop, {})  # the pool serves; a new spare opens meanwhile
        replacement = await _until_spare_is_open(rl)
        assert replacement is not ended
        assert ended.closed
        await rl.trigger(noop, {})
        assert len((await rl.runs.list(limit=10)).data) == 3


async def test_a_call_cancelled_mid_statement_leaves_a_usable_spare(postgres_dsn: str) -> None:
    storage = PostgresStorage(postgres_dsn)
    await storage.open()
    try:
        spare = _spare_of(storage)
        spare.take()  # starts opening it
        conn = await _open_spare(spare)
        statement = asyncio.create_task(conn.execute("SELECT pg_sleep(5)"))
        await asyncio.sleep(0.1)
        statement.cancel()
        with pytest.raises(asyncio.CancelledError):
            await statement
        spare.give_back(conn)
        # Whatever the spare hands out next (the same connection once psycopg has
        # cancelled the statement, or a new one) answers its own statement.
        after = await _open_spare(spare)
        cur = await after.execute("SELECT 42")
        assert await cur.fetchone() == (42,)
        spare.give_back(after)
    finally:
        await storage.close()


async def test_a_spare_left_in_a_transaction_is_dropped(postgres_dsn: str) -> None:
    storage = PostgresStorage(postgres_dsn)
    await storage.open()
    try:
        spare = _spare_of(storage)
        spare.take()
        conn = await _open_spare(spare)
        await conn.execute("BEGIN")
        spare.give_back(conn)  # not idle: dropped, never handed out again
        reopened = await _open_spare(spare)
        assert reopened is not conn
        cur = await reopened.execute("SELECT 1")
        assert await cur.fetchone() == (1,)
        spare.give_back(reopened)
    finally:
        await storage.close()


def _spare_of(storage: PostgresStorage) -> SpareConnection:
    assert storage._db.spare is not None
    return storage._db.spare


async def _open_spare(spare: SpareConnection) -> psycopg.AsyncConnection[Any]:
    for _ in range(500):
        conn = spare.take()
        if conn is not None:
            return conn
        await asyncio.sleep(0.01)
    raise AssertionError("the spare connection never opened")


async def test_a_connection_that_fails_its_setup_is_closed_not_kept(postgres_dsn: str) -> None:
    # Its setup (SET jit = off) fails inside an aborted transaction: the connection is
    # open but unusable, and must be closed rather than left to the garbage collector.
    opened: list[psycopg.AsyncConnection[Any]] = []

    async def aborted() -> psycopg.AsyncConnection[Any]:
        conn = await psycopg.AsyncConnection.connect(postgres_dsn)
        opened.append(conn)
        with pytest.raises(psycopg.errors.DivisionByZero):
            await conn.execute("SELECT 1 / 0")
        return conn

    spare = SpareConnection(aborted, retry_after=60)
    try:
        assert spare.take() is None  # starts the opening
        for _ in range(500):
            if opened and opened[0].closed:
                break
            await asyncio.sleep(0.01)
        assert len(opened) == 1 and opened[0].closed
        assert spare.take() is None  # nothing kept, and no new attempt before retry_after
        assert len(opened) == 1
    finally:
        await spare.close()


async def test_a_conflict_on_the_spare_is_tried_again_on_the_pool_and_creates_one_run(
    postgres_dsn: str, environment: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with _spare_ready(postgres_dsn, environment) as (rl, conn):
        await rl.trigger(noop, {})  # its statement is prepared from here on
        sent = conn.send_bare
        refused: list[bool] = []

        def conflicting(*args: Any) -> bool:
            if not refused:
                refused.append(True)
                raise psycopg.errors.SerializationFailure("could not serialize")
            return sent(*args)

        monkeypatch.setattr(conn, "send_bare", conflicting)
        before = _pool_requests(rl)
        run = await rl.trigger(noop, {"after": True})
        assert refused == [True]
        assert _pool_requests(rl) == before + 1  # the second attempt, on a pooled connection
        assert await _until_spare_is_open(rl) is conn
        ids = [listed.id for listed in (await rl.runs.list(limit=10)).data]
        assert ids.count(run.id) == 1 and len(ids) == 3
