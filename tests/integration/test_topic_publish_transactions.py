"""publish_messages inside a caller's transaction, and concurrent publishes on PostgreSQL.

The message, its deduplication entry and its deliveries exist iff the caller's
transaction commits (contract 5.4.5); a refused message id takes back the publish
and nothing else of the caller's. On PostgreSQL a publish waits for another that
holds one of its (subscription, key) locks, message id or deduplication key, so
for one key sequence order is commit order (5.7.4).
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

import psycopg
import pytest

from runlane import ErrorCode, RunlaneError, postgres_lane, sqlite_lane
from runlane.ports.storage import NewDelivery, NewMessage, RunFilter, Storage, StoresMessages
from runlane.topics.publishing import canonical_envelope
from runlane.types.runs import SubscriptionMode

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
ORDERED = SubscriptionMode.ORDERED


def _message(
    message_id: str,
    *run_ids: str,
    key: str | None = "k",
    payload: Any = 1,
    dedup: str | None = None,
) -> NewMessage:
    return NewMessage(
        id=message_id,
        topic="orders",
        payload=payload,
        payload_json=str(payload),
        attributes={},
        envelope=canonical_envelope("orders", payload, {}),
        window_ends_at=NOW + timedelta(hours=1),
        deduplication_key=dedup,
        deliveries=tuple(NewDelivery(r, "ship", "main", ORDERED, key) for r in run_ids),
    )


async def _run_ids(store: Storage, environment: str) -> list[str]:
    return sorted(r.id for r in (await store.list_runs(environment, RunFilter(), 50, None)).data)


def _topics(store: Storage) -> StoresMessages:
    assert isinstance(store, StoresMessages)
    return cast(StoresMessages, store)


# -- SQLite ------------------------------------------------------------------------------


@pytest.fixture
async def sqlite_store(tmp_path: Path) -> AsyncIterator[tuple[Storage, Path]]:
    path = tmp_path / "topics.db"
    store = sqlite_lane(path).storage
    await store.open()
    yield store, path
    await store.close()


async def test_sqlite_publish_in_a_rolled_back_transaction_leaves_nothing(
    sqlite_store: tuple[Storage, Path], environment: str
) -> None:
    store, path = sqlite_store
    conn = sqlite3.connect(path, isolation_level=None)  # no row factory: rows are tuples
    try:
        conn.execute("BEGIN IMMEDIATE")
        (outcome,) = await _topics(store).publish_messages(
            environment, [_message("m1", "d1", dedup="k")], NOW, connection=conn
        )
        assert [r.id for r in outcome.runs] == ["d1"] and not outcome.duplicate
        conn.rollback()
    finally:
        conn.close()
    assert await _run_ids(store, environment) == []
    # The id and the deduplication key are free: a new publish of both fans out.
    (again,) = await _topics(store).publish_messages(
        environment, [_message("m1", "d2", payload=2, dedup="k")], NOW
    )
    assert not again.duplicate and await _run_ids(store, environment) == ["d2"]


async def test_sqlite_publish_in_a_committed_transaction_is_there_with_the_callers_rows(
    sqlite_store: tuple[Storage, Path], environment: str
) -> None:
    store, path = sqlite_store
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("CREATE TABLE orders (id TEXT)")
        conn.execute("INSERT INTO orders VALUES ('o1')")
        await _topics(store).publish_messages(
            environment, [_message("m1", "d1")], NOW, connection=conn
        )
        conn.execute("COMMIT")
    finally:
        conn.close()
    assert await _run_ids(store, environment) == ["d1"]


async def test_sqlite_a_refused_message_id_takes_back_the_publish_only(
    sqlite_store: tuple[Storage, Path], environment: str
) -> None:
    store, path = sqlite_store
    await _topics(store).publish_messages(environment, [_message("taken", "d0")], NOW)
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("CREATE TABLE orders (id TEXT)")
        conn.execute("INSERT INTO orders VALUES ('o1')")
        with pytest.raises(RunlaneError) as refused:
            await _topics(store).publish_messages(
                environment,
                [_message("fresh", "d1"), _message("taken", "d2", payload=9)],
                NOW,
                connection=conn,
            )
        assert refused.value.code is ErrorCode.MESSAGE_ID_CONFLICT
        assert conn.in_transaction
        conn.execute("COMMIT")
        assert conn.execute("SELECT id FROM orders").fetchall() == [("o1",)]
    finally:
        conn.close()
    assert await _run_ids(store, environment) == ["d0"]


async def test_sqlite_publish_refuses_a_connection_of_another_kind(
    sqlite_store: tuple[Storage, Path], environment: str
) -> None:
    store, _ = sqlite_store
    with pytest.raises(RunlaneError) as refused:
        await _topics(store).publish_messages(
            environment, [_message("m1", "d1")], NOW, connection=object()
        )
    assert refused.value.code is ErrorCode.CONFIGURATION_INVALID
    assert await _run_ids(store, environment) == []


# -- PostgreSQL --------------------------------------------------------------------------


@pytest.fixture
async def pg_store(postgres_dsn: str) -> AsyncIterator[Storage]:
    store = postgres_lane(postgres_dsn).storage
    await store.migrate()
    await store.open()
    yield store
    await store.close()


async def test_postgres_publish_in_a_rolled_back_transaction_leaves_nothing(
    pg_store: Storage, postgres_dsn: str, environment: str
) -> None:
    for connect in (psycopg.Connection.connect, psycopg.AsyncConnection.connect):
        conn: Any = connect(postgres_dsn)
        if not isinstance(conn, psycopg.Connection):
            conn = await conn
        try:
            (outcome,) = await _topics(pg_store).publish_messages(
                environment, [_message("m1", "d1", dedup="k")], NOW, connection=conn
            )
            assert [r.id for r in outcome.runs] == ["d1"]
            assert await _run_ids(pg_store, environment) == []  # not visible before commit
            rolled = conn.rollback()
            if rolled is not None:
                await rolled
        finally:
            closed = conn.close()
            if closed is not None:
                await closed
        assert await _run_ids(pg_store, environment) == []
    (again,) = await _topics(pg_store).publish_messages(
        environment, [_message("m1", "d2", payload=2, dedup="k")], NOW
    )
    assert not again.duplicate and await _run_ids(pg_store, environment) == ["d2"]


async def test_postgres_a_refused_message_id_takes_back_the_publish_only(
    pg_store: Storage, postgres_dsn: str, environment: str
) -> None:
    await _topics(pg_store).publish_messages(environment, [_message("taken", "d0")], NOW)
    table = f"orders_{environment.replace('-', '_')}"
    async with await psycopg.AsyncConnection.connect(postgres_dsn) as conn:
        await conn.execute(f"CREATE TABLE {table} (id text)")
        await conn.execute(f"INSERT INTO {table} VALUES ('o1')")
        with pytest.raises(RunlaneError) as refused:
            await _topics(pg_store).publish_messages(
                environment,
                [_message("fresh", "d1"), _message("taken", "d2", payload=9)],
                NOW,
                connection=conn,
            )
        assert refused.value.code is ErrorCode.MESSAGE_ID_CONFLICT
        await conn.commit()
        cur = await conn.execute(f"SELECT id FROM {table}")
        assert await cur.fetchall() == [("o1",)]
        await conn.execute(f"DROP TABLE {table}")
        await conn.commit()
    assert await _run_ids(pg_store, environment) == ["d0"]


async def _blocked(task: asyncio.Task[Any]) -> bool:
    """Whether ``task`` is still waiting a moment later (on a lock held elsewhere)."""
    done, _ = await asyncio.wait({task}, timeout=0.5)
    return not done


async def test_postgres_a_publish_of_a_key_waits_for_an_open_publish_of_that_key(
    pg_store: Storage, postgres_dsn: str, environment: str
) -> None:
    topics = _topics(pg_store)
    async with await psycopg.AsyncConnection.connect(postgres_dsn) as conn:
        (first,) = await topics.publish_messages(
            environment, [_message("m1", "d1")], NOW, connection=conn
        )
        second = asyncio.ensure_future(
            topics.publish_messages(environment, [_message("m2", "d2")], NOW)
        )
        other_key = await topics.publish_messages(
            environment, [_message("m3", "d3", key="other")], NOW
        )
        assert await _blocked(second)  # same (subscription, key): waits for the lock
        await conn.commit()
    ((later,),) = [await second]
    assert later.message.sequence > first.message.sequence
    assert other_key[0].message.sequence > first.message.sequence
    assert await _run_ids(pg_store, environment) == ["d1", "d2", "d3"]


async def test_postgres_concurrent_publishes_of_one_key_or_id_answer_with_the_committed_one(
    pg_store: Storage, postgres_dsn: str, environment: str
) -> None:
    topics = _topics(pg_store)
    async with await psycopg.AsyncConnection.connect(postgres_dsn) as conn:
        await topics.publish_messages(
            environment,
            [_message("m1", "d1", key=None, dedup="k"), _message("m2", "d2", key=None)],
            NOW,
            connection=conn,
        )
        by_key = asyncio.ensure_future(
            topics.publish_messages(environment, [_message("m9", "d9", key=None, dedup="k")], NOW)
        )
        by_id = asyncio.ensure_future(
            topics.publish_messages(environment, [_message("m2", "d8", key=None)], NOW)
        )
        assert await _blocked(by_key) and await _blocked(by_id)
        await conn.commit()
    ((dup_key,),) = [await by_key]
    ((dup_id,),) = [await by_id]
    assert dup_key.duplicate and dup_key.message.id == "m1"
    assert [r.id for r in dup_key.runs] == ["d1"]
    assert dup_id.duplicate and [r.id for r in dup_id.runs] == ["d2"]
    assert await _run_ids(pg_store, environment) == ["d1", "d2"]


async def test_postgres_a_group_of_plain_publishes_meeting_an_id_written_meanwhile(
    pg_store: Storage, postgres_dsn: str, environment: str
) -> None:
    # Plain messages of one call are written in one autocommitted statement; an id
    # another transaction is writing makes it wait, then fail whole when that one
    # commits: the call is published again the general way, the taken id answered
    # as its duplicate and the other message written once.
    topics = _topics(pg_store)
    async with await psycopg.AsyncConnection.connect(postgres_dsn) as conn:
        await topics.publish_messages(
            environment, [_message("m1", "d1", key=None)], NOW, connection=conn
        )
        group = asyncio.ensure_future(
            topics.publish_messages(
                environment,
                [_message("m0", "d0", key=None), _message("m1", "d9", key=None)],
                NOW,
            )
        )
        assert await _blocked(group)
        await conn.commit()
    fresh, dup = await group
    assert not fresh.duplicate and [r.id for r in fresh.runs] == ["d0"]
    assert dup.duplicate and [r.id for r in dup.runs] == ["d1"]
    assert await _run_ids(pg_store, environment) == ["d0", "d1"]


async def test_postgres_a_plain_publish_in_a_callers_transaction_meeting_an_id_written_meanwhile(
    pg_store: Storage, postgres_dsn: str, environment: str
) -> None:
    # Inside the caller's transaction the statement fails in its savepoint: the
    # publish is answered the general way and the caller's own work is kept.
    topics = _topics(pg_store)
    table = f"notes_{environment.replace('-', '_')}"
    async with (
        await psycopg.AsyncConnection.connect(postgres_dsn) as writer,
        await psycopg.AsyncConnection.connect(postgres_dsn) as caller,
    ):
        await caller.execute(f"CREATE TABLE {table} (id text)")
        await caller.commit()
        await topics.publish_messages(
            environment, [_message("m1", "d1", key=None)], NOW, connection=writer
        )
        await caller.execute(f"INSERT INTO {table} VALUES ('mine')")
        publish = asyncio.ensure_future(
            topics.publish_messages(
                environment,
                [_message("m0", "d0", key=None), _message("m1", "d9", key=None)],
                NOW,
                connection=caller,
            )
        )
        assert await _blocked(publish)
        await writer.commit()
        fresh, dup = await publish
        assert not fresh.duplicate and dup.duplicate and [r.id for r in dup.runs] == ["d1"]
        await caller.commit()
        cur = await caller.execute(f"SELECT id FROM {table}")
        assert await cur.fetchall() == [("mine",)]
        await caller.execute(f"DROP TABLE {table}")
        await caller.commit()
    assert await _run_ids(pg_store, environment) == ["d0", "d1"]
