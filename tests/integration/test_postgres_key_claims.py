"""Claims of keyed deliveries on PostgreSQL under concurrency (contract 5.7, 5.14).

A claim statement's snapshot cannot see another worker's uncommitted lease, so
keyed deliveries are claimed under their (subscription, key) advisory lock, the
same lock publishes take. These tests hold that lock from outside, and race
claimers on separate connection pools against one key.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import cast

import psycopg
import pytest

from runlane import RunStatus, postgres_lane
from runlane.ports.storage import (
    LeaseRequest,
    NewDelivery,
    NewEvent,
    NewMessage,
    QueuePolicy,
    RunChanges,
    SettlesAndClaims,
    Storage,
    StoresMessages,
    Transition,
)
from runlane.storage.postgres import PostgresStorage
from runlane.storage.sql.claiming import key_lock_name
from runlane.topics.publishing import canonical_envelope
from runlane.types.runs import Run, RunEventType, SubscriptionMode

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
MAIN = QueuePolicy("main")
EXCLUSIVE = SubscriptionMode.EXCLUSIVE
ORDERED = SubscriptionMode.ORDERED


def _lease(worker: str) -> LeaseRequest:
    return LeaseRequest(worker, NOW + timedelta(minutes=5))


def _message(run_id: str, mode: SubscriptionMode, key: str | None) -> NewMessage:
    return NewMessage(
        id=f"m-{run_id}",
        topic="orders",
        payload=1,
        payload_json="1",
        attributes={},
        envelope=canonical_envelope("orders", 1, {}),
        window_ends_at=NOW + timedelta(hours=1),
        deliveries=(NewDelivery(run_id, "ship", "main", mode, key),),
    )


async def _publish(
    store: Storage, environment: str, *runs: tuple[str, SubscriptionMode, str | None]
) -> None:
    topics = cast(StoresMessages, store)
    await topics.publish_messages(environment, [_message(*run) for run in runs], NOW)


def _succeed(run: Run) -> Transition:
    assert run.lease is not None
    return Transition(
        run.id,
        run.event_sequence,
        RunChanges(RunStatus.SUCCEEDED),
        (NewEvent(RunEventType.SUCCEEDED),),
        lease_token=run.lease.token,
    )


@pytest.fixture
async def stores(postgres_dsn: str) -> AsyncIterator[list[PostgresStorage]]:
    """Four drivers, each with its own pool: four workers' worth of connections."""
    opened = []
    for _ in range(4):
        store = postgres_lane(postgres_dsn).storage
        assert isinstance(store, PostgresStorage)
        await store.migrate()
        await store.open()
        opened.append(store)
    yield opened
    for store in opened:
        await store.close()


async def _hold_key_lock(
    dsn: str, store: PostgresStorage, environment: str, key: str
) -> psycopg.AsyncConnection:
    """An open transaction holding the key lock of ("ship", key), as a publish does."""
    conn = await psycopg.AsyncConnection.connect(dsn)
    await conn.execute("BEGIN")
    name = key_lock_name(store.schema, environment, "ship", key)
    await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", [name])
    return conn


async def test_a_claim_skips_a_key_another_transaction_decides_on_and_takes_it_after(
    stores: list[PostgresStorage], postgres_dsn: str, environment: str
) -> None:
    store = stores[0]
    await _publish(
        store,
        environment,
        ("k1", EXCLUSIVE, "busy"),
        ("f1", EXCLUSIVE, "free"),
        ("p1", SubscriptionMode.NONE, None),
    )
    holder = await _hold_key_lock(postgres_dsn, store, environment, "busy")
    try:
        # The key lock (named as publishes name it) keeps the claim off that key only;
        # the claim does not wait for it.
        claimed = await asyncio.wait_for(
            store.claim_due_runs(environment, [MAIN], 10, _lease("w"), NOW), timeout=5
        )
        assert sorted(r.id for r in claimed) == ["f1", "p1"]
    finally:
        await holder.rollback()
        await holder.close()
    (taken,) = await store.claim_due_runs(environment, [MAIN], 10, _lease("w"), NOW)
    assert taken.id == "k1"


async def test_claim_run_waits_for_the_key_lock_and_then_sees_the_committed_claim(
    stores: list[PostgresStorage], postgres_dsn: str, environment: str
) -> None:
    store = stores[0]
    await _publish(store, environment, ("d1", EXCLUSIVE, "k"), ("d2", EXCLUSIVE, "k"))
    holder = await _hold_key_lock(postgres_dsn, store, environment, "k")
    try:
        waiting = asyncio.create_task(store.claim_run(environment, "d2", _lease("w2"), NOW))
        await asyncio.sleep(0.3)
        assert not waiting.done()
        # The holder claims d1 in its transaction, as a worker under the lock would.
        await holder.execute(
            f"UPDATE {store.schema}.runlane_runs SET status = 'running', lease_token = 't',"
            " lease_owner = 'w1', lease_expires_at = %s"
            " WHERE environment = %s AND id = 'd1'",
            [int((NOW + timedelta(minutes=5)).timestamp() * 1_000_000), environment],
        )
        await holder.commit()
        # claim_run's snapshot comes after the lock: it sees d1's lease and refuses d2.
        assert await asyncio.wait_for(waiting, timeout=5) is None
    finally:
        await holder.close()


async def test_racing_claimers_never_lease_two_deliveries_of_one_key(
    stores: list[PostgresStorage], environment: str
) -> None:
    rounds = 40
    await _publish(
        stores[0],
        environment,
        *[(f"e{n:03d}", EXCLUSIVE, "hot") for n in range(rounds)],
        *[(f"o{n:03d}", ORDERED, "line") for n in range(rounds)],
    )
    settles = cast(list[SettlesAndClaims], stores)
    chooser = random.Random(7)
    order: list[str] = []
    ids = [f"e{n:03d}" for n in range(rounds)] + [f"o{n:03d}" for n in range(rounds)]

    async def claim(worker: int, round_number: int) -> list[Run]:
        store = stores[worker]
        lease = _lease(f"w{worker}")
        path = (worker + round_number) % 3
        if path == 0:
            return await store.claim_due_runs(environment, [MAIN], 5, lease, NOW)
        if path == 1:
            _, runs = await settles[worker].apply_transitions_and_claim(
                environment, [], NOW, [MAIN], 5, lease
            )
            return runs
        run = await store.claim_run(environment, chooser.choice(ids), lease, NOW)
        return [] if run is None else [run]

    for round_number in range(rounds):
        # Every worker claims at once, each on its own connection, by every claim path.
        racing = [claim(worker, round_number) for worker in range(len(stores))]
        claimed = [run for runs in await asyncio.gather(*racing) for run in runs]
        by_key: dict[str | None, list[str]] = {}
        for run in claimed:
            by_key.setdefault(run.partition_key, []).append(run.id)
        assert all(len(held) <= 1 for held in by_key.values()), by_key
        order += by_key.get("line", [])
        for run in claimed:
            assert await stores[0].apply_transitions(environment, [_succeed(run)], NOW) == [True]
    # ORDERED deliveries ran one at a time, in sequence order, without a gap.
    assert order and order == [f"o{n:03d}" for n in range(len(order))]
