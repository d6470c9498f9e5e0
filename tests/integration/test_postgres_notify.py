"""LISTEN/NOTIFY wakeups: idle workers hear about new work at once, and survive losing it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import psycopg
import pytest

from runlane import Context, Runlane, RunStatus, postgres_lane, queue, task
from runlane.storage.postgres import PostgresStorage
from runlane.testing import wait_for_status


@task("ping")
async def ping(payload: Any, ctx: Context) -> None:
    return None


Factory = Callable[..., Runlane]


@pytest.fixture
async def runtime(postgres_dsn: str, environment: str) -> AsyncIterator[Factory]:
    """Runtimes on the shared database (separate pools, like separate processes)."""
    opened: list[Runlane] = []

    def build(env: str | None = None) -> Runlane:
        rl = Runlane(
            lane=postgres_lane(postgres_dsn),
            queues=[queue("main", default=True)],
            tasks=[ping],
            environment=env or environment,
        )
        opened.append(rl)
        return rl

    await build().migrate()
    yield build
    for rl in opened:
        await rl.close()


def _storage(rl: Runlane) -> PostgresStorage:
    assert isinstance(rl.storage, PostgresStorage)
    return rl.storage


async def test_a_trigger_from_another_runtime_wakes_a_waiter_promptly(runtime: Factory) -> None:
    waiter, producer = runtime(), runtime()
    await waiter.open()
    storage = _storage(waiter)
    assert await storage.wait_for_work(waiter.environment, 0.05) is False  # nothing yet
    waiting = asyncio.ensure_future(storage.wait_for_work(waiter.environment, 10))
    await asyncio.sleep(0.05)
    started = time.monotonic()
    await producer.trigger(ping, None)
    assert await waiting is True
    assert time.monotonic() - started < 1


async def test_an_announcement_made_while_nobody_waited_is_kept_once(runtime: Factory) -> None:
    waiter, producer = runtime(), runtime()
    storage = _storage(waiter)
    await storage.wait_for_work(waiter.environment, 0.05)
    await producer.trigger_many(ping, [None] * 3)
    await asyncio.sleep(0.2)
    assert await storage.wait_for_work(waiter.environment, 1) is True
    assert await storage.wait_for_work(waiter.environment, 0.2) is False


async def test_other_environments_and_scheduled_runs_do_not_wake(
    runtime: Factory, environment: str
) -> None:
    waiter, elsewhere = runtime(), runtime(f"{environment}-other")
    storage = _storage(waiter)
    await storage.wait_for_work(waiter.environment, 0.05)
    await elsewhere.trigger(ping, None)
    await runtime().trigger(ping, None, delay="1h")
    assert await storage.wait_for_work(waiter.environment, 0.5) is False


async def test_a_lost_listening_connection_is_replaced(runtime: Factory, postgres_dsn: str) -> None:
    waiter, producer = runtime(), runtime()
    storage = _storage(waiter)
    await storage.wait_for_work(waiter.environment, 0.05)
    with psycopg.connect(postgres_dsn, autocommit=True) as admin:
        killed = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE application_name = 'runlane' AND query LIKE 'LISTEN%'"
        ).fetchall()
    assert killed
    assert await storage.wait_for_work(waiter.environment, 2) is False
    waiting = asyncio.ensure_future(storage.wait_for_work(waiter.environment, 10))
    await asyncio.sleep(0.2)
    await producer.trigger(ping, None)
    assert await waiting is True


async def test_an_unreachable_server_makes_waiting_a_plain_sleep(environment: str) -> None:
    storage = PostgresStorage("postgresql://app@127.0.0.1:1/app")
    started = time.monotonic()
    assert await storage.wait_for_work(environment, 0.3) is False
    assert 0.25 <= time.monotonic() - started < 2
    await storage.close()


async def test_an_idle_polling_worker_starts_a_run_from_another_process_within_a_second(
    runtime: Factory,
) -> None:
    consumer, producer = runtime(), runtime()
    worker = consumer.worker(concurrency=2, poll_interval="30s", handle_signals=False)
    running = asyncio.create_task(worker.run())
    try:
        await asyncio.sleep(1.0)  # the worker is idle, waiting on notifications
        started = time.monotonic()
        run = await producer.trigger(ping, None)
        await wait_for_status(producer, run.id, RunStatus.SUCCEEDED, within=5)
        assert time.monotonic() - started < 1
    finally:
        await worker.stop()
        await asyncio.wait_for(running, 5)


async def test_a_burst_of_triggers_wakes_an_idle_worker_for_every_run(runtime: Factory) -> None:
    """Triggers back to back from another process: each run starts without waiting for the
    poll interval."""
    consumer, producer = runtime(), runtime()
    worker = consumer.worker(concurrency=4, poll_interval="30s", handle_signals=False)
    running = asyncio.create_task(worker.run())
    try:
        await asyncio.sleep(1.0)  # idle: the worker waits on notifications
        runs = [await producer.trigger(ping, None) for _ in range(40)]
        for run in runs:
            await wait_for_status(producer, run.id, RunStatus.SUCCEEDED, within=3)
    finally:
        await worker.stop()
        await asyncio.wait_for(running, 5)
