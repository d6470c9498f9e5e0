"""``rl.publish`` inside a caller's transaction on both lanes, its wakeups on a transport
lane, and ``rl.sync.publish`` (contract 5.4.2, 5.4.5)."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from runlane import (
    DeliveryContext,
    Lane,
    Message,
    Runlane,
    RunStatus,
    postgres_lane,
    queue,
    sqlite_lane,
    subscription,
    topic,
)
from runlane.ports.storage import LeaseRequest
from runlane.ports.transport import DeliveryMessage, IgnoredReason
from runlane.transport.memory import MemoryTransport

MAIN = queue("main", default=True)
ORDERS = topic("orders")


async def _noop(message: Message[Any], ctx: DeliveryContext) -> None:
    return None


SUBS = [
    subscription("orders.a", topic=ORDERS, handler=_noop),
    subscription("orders.b", topic=ORDERS, handler=_noop, mode="exclusive", key="customer"),
]


def _runtime(lane: Lane, environment: str = "default") -> Runlane:
    return Runlane(
        lane=lane,
        queues=[MAIN],
        tasks=[],
        topics=[ORDERS],
        subscriptions=SUBS,
        environment=environment,
    )


@pytest.fixture
async def sqlite_rl(tmp_path: Path) -> AsyncIterator[Runlane]:
    rl = _runtime(sqlite_lane(tmp_path / "app.db"))
    await rl.open()
    yield rl
    await rl.close()


async def _run_count(rl: Runlane) -> int:
    return len((await rl.runs.list(limit=100)).data)


async def test_a_sqlite_transaction_that_rolls_back_leaves_no_message_and_no_delivery(
    sqlite_rl: Runlane, tmp_path: Path
) -> None:
    conn = sqlite3.connect(tmp_path / "app.db", isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    receipt = await sqlite_rl.publish(
        ORDERS, {"n": 1}, attributes={"customer": "c1"}, message_id="m-1", connection=conn
    )
    assert len(receipt.runs) == 2
    conn.execute("ROLLBACK")
    conn.close()
    assert await _run_count(sqlite_rl) == 0
    # The message id is free again: other content under it is not a conflict.
    again = await sqlite_rl.publish(ORDERS, {"n": 2}, message_id="m-1")
    assert not again.duplicate and len(again.runs) == 2


async def test_a_sqlite_transaction_that_commits_keeps_every_delivery(
    sqlite_rl: Runlane, tmp_path: Path
) -> None:
    conn = sqlite3.connect(tmp_path / "app.db", isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("CREATE TABLE IF NOT EXISTS app_orders (id INTEGER)")
    conn.execute("INSERT INTO app_orders VALUES (1)")
    receipt = await sqlite_rl.publish(ORDERS, {"n": 1}, deduplication_key="o-1", connection=conn)
    conn.execute("COMMIT")
    conn.close()
    runs = [await sqlite_rl.runs.get(run.id) for run in receipt.runs]
    assert {run.status for run in runs} == {RunStatus.QUEUED}
    duplicate = await sqlite_rl.publish(ORDERS, {"n": 9}, deduplication_key="o-1")
    assert duplicate.duplicate and duplicate.message_id == receipt.message_id


async def test_a_postgres_transaction_that_rolls_back_leaves_no_delivery(
    postgres_dsn: str, environment: str
) -> None:
    rl = _runtime(postgres_lane(postgres_dsn), environment)
    await rl.migrate()
    await rl.open()
    try:
        async with await psycopg.AsyncConnection.connect(postgres_dsn) as conn:
            receipt = await rl.publish(ORDERS, {"n": 1}, message_id="m-1", connection=conn)
            assert len(receipt.runs) == 2
            await conn.rollback()
        assert await _run_count(rl) == 0
        with psycopg.connect(postgres_dsn) as sync_conn:
            kept = await rl.publish(ORDERS, {"n": 1}, message_id="m-2", connection=sync_conn)
            sync_conn.commit()
        assert {(await rl.runs.get(run.id)).status for run in kept.runs} == {RunStatus.QUEUED}
        assert await _run_count(rl) == 2
    finally:
        await rl.close()


async def test_wakeups_go_out_after_commit_and_wait_for_tick_inside_a_transaction(
    tmp_path: Path,
) -> None:
    transport = MemoryTransport([MAIN])
    rl = _runtime(Lane(sqlite_lane(tmp_path / "app.db").storage, transport))
    await rl.open()
    try:
        eager = await rl.publish(ORDERS, {"n": 1}, attributes={"customer": "c1"})
        assert sorted(a.message.run_id for a in transport.published) == sorted(
            run.id for run in eager.runs
        )
        transport.published.clear()
        conn = sqlite3.connect(tmp_path / "app.db", isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        inside = await rl.publish(ORDERS, {"n": 2}, connection=conn)
        conn.execute("COMMIT")
        conn.close()
        assert transport.published == []
        report = await rl.tick()
        assert report.outbox_published == len(inside.runs) == 2
        assert {a.message.run_id for a in transport.published} == {r.id for r in inside.runs}
    finally:
        await rl.close()


def test_sync_publish_blocks_until_committed(tmp_path: Path) -> None:
    rl = _runtime(sqlite_lane(tmp_path / "app.db"))
    try:
        receipt = rl.sync.publish(ORDERS, {"n": 1}, attributes={"customer": "c1"})
        assert [run.task_id for run in receipt.runs] == ["orders.a", "orders.b"]
        assert rl.sync.subscriptions.get("orders.a").waiting == 1
        assert rl.sync.dead_letters.list().data == []
    finally:
        rl.sync.close()


async def test_execute_delivery_runs_a_delivery_and_ignores_one_whose_key_is_busy(
    tmp_path: Path,
) -> None:
    transport = MemoryTransport([MAIN])
    rl = _runtime(Lane(sqlite_lane(tmp_path / "app.db").storage, transport))
    await rl.open()
    try:
        first = await rl.publish(ORDERS, {"n": 1}, attributes={"customer": "c1"})
        second = await rl.publish(ORDERS, {"n": 2}, attributes={"customer": "c1"})
        first_b, second_b = first.runs[1], second.runs[1]
        assert first_b.id in {a.message.run_id for a in transport.published}
        done = await rl.execute_delivery(DeliveryMessage(rl.environment, first.runs[0].id, "main"))
        assert done.executed and done.run is not None
        assert done.run.status is RunStatus.SUCCEEDED
        now = rl.clock.now()
        lease = LeaseRequest("elsewhere", now + timedelta(seconds=30))
        held = await rl.storage.claim_run(rl.environment, first_b.id, lease, now)
        assert held is not None
        busy = await rl.execute_delivery(DeliveryMessage(rl.environment, second_b.id, "main"))
        assert not busy.executed and busy.reason is IgnoredReason.KEY_UNAVAILABLE
        assert (await rl.runs.get(second_b.id)).status is RunStatus.QUEUED
    finally:
        await rl.close()


async def test_concurrent_plain_publishes_share_storage_calls_and_keep_their_receipts(
    tmp_path: Path,
) -> None:
    logs = topic("logs")
    rl = Runlane(
        lane=sqlite_lane(tmp_path / "plain.db"),
        queues=[MAIN],
        tasks=[],
        topics=[logs],
        subscriptions=[
            subscription("logs.a", topic=logs, handler=_noop),
            subscription("logs.b", topic=logs, handler=_noop),
        ],
    )
    async with rl:
        storage: Any = rl.storage
        real = storage.publish_messages
        groups: list[int] = []

        async def publish_messages(*args: Any, **kwargs: Any) -> Any:
            outcomes = await real(*args, **kwargs)
            groups.append(len(outcomes))
            return outcomes

        storage.publish_messages = publish_messages
        receipts = await asyncio.gather(
            *(rl.publish(logs, {"n": n}, message_id=f"m-{n}") for n in range(50))
        )
        assert [receipt.message_id for receipt in receipts] == [f"m-{n}" for n in range(50)]
        assert all(len(receipt.runs) == 2 for receipt in receipts)
        assert sum(groups) == 50
        assert len(groups) < 50 and max(groups) > 1, groups  # group commit, not a call each
        runs = (await rl.runs.list(limit=200)).data
        assert len({run.id for run in runs}) == 100
        by_message = {receipt.message_id: {run.id for run in receipt.runs} for receipt in receipts}
        assert len(set().union(*by_message.values())) == 100  # no receipt shows another's runs
