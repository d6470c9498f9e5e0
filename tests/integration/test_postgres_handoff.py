"""Hand-offs: a lone trigger gives a due run, leased, to a worker standing by.

The run then starts after one commit. What must hold: the run's row and history
are what a claim would have written; runs a claim would treat specially (bounded
queues, keys, later run times, batches) are never handed off; a run handed over
whose notification went missing still starts; and an offer whose worker was
killed is never taken, and tick removes it.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from tests.support import worker_app

from runlane import (
    Context,
    RetryPolicy,
    Runlane,
    RunStatus,
    Worker,
    WorkerMode,
    postgres_lane,
    queue,
    task,
)
from runlane.ports.lane import Lane
from runlane.storage.postgres import PostgresStorage
from runlane.testing import wait_for_status
from runlane.transport.memory import MemoryTransport
from runlane.types.runs import Run, RunEventType

ROOT = Path(__file__).resolve().parents[2]

main = queue("main", default=True)
bounded = queue("bounded", concurrency_limit=2)
SEEN: list[tuple[str, int]] = []


@task("note", retry=RetryPolicy(max_attempts=3, initial_delay="100ms", jitter=False))
async def note(payload: Any, ctx: Context) -> None:
    SEEN.append((ctx.run_id, ctx.attempt))


@task("note.bounded", queue=bounded)
async def note_bounded(payload: Any, ctx: Context) -> None:
    SEEN.append((ctx.run_id, ctx.attempt))


Factory = Callable[[], Runlane]


@pytest.fixture
async def runtime(postgres_dsn: str, environment: str) -> AsyncIterator[Factory]:
    """Runtimes on the shared database (separate pools, like separate processes)."""
    opened: list[Runlane] = []

    def build() -> Runlane:
        rl = Runlane(
            lane=postgres_lane(postgres_dsn),
            queues=[main, bounded],
            tasks=[note, note_bounded],
            environment=environment,
            lease_duration="30s",
        )
        opened.append(rl)
        return rl

    await build().migrate()
    yield build
    for rl in opened:
        await rl.close()


def _offers(dsn: str, environment: str) -> list[dict[str, Any]]:
    with psycopg.connect(dsn, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute(
            "SELECT worker_id, queues, free, handed, lock_key, lease_token "
            "FROM runlane.runlane_standby "
            "WHERE environment = %s",
            (environment,),
        )
        names = [column.name for column in cur.description or ()]
        return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


async def _standing_by(dsn: str, environment: str, within: float = 10.0) -> dict[str, Any]:
    """The first offer in ``environment``, once there is one."""
    offers: list[dict[str, Any]] = []

    def found() -> bool:
        offers[:] = _offers(dsn, environment)
        return bool(offers)

    await _eventually(found, within)
    return offers[0]


async def _eventually(check: Callable[[], bool], within: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        if check():
            return
        assert loop.time() < deadline, "not within the time allowed"
        await asyncio.sleep(0.02)


@asynccontextmanager
async def _idle_worker(rl: Runlane) -> AsyncIterator[Worker]:
    """A running worker, stopped on the way out."""
    # A long poll interval: a run starts quickly only by a hand-off or a notification.
    worker = rl.worker(concurrency=4, mode=WorkerMode.POLL, poll_interval="30s")
    running = asyncio.ensure_future(worker.run())
    try:
        yield worker
    finally:
        await worker.stop()
        await running


async def test_an_idle_worker_is_handed_a_lone_trigger_as_a_claim_would_lease_it(
    runtime: Factory, postgres_dsn: str, environment: str
) -> None:
    consumer, producer = runtime(), runtime()
    async with _idle_worker(consumer) as worker:
        offer = await _standing_by(postgres_dsn, environment)
        assert offer["worker_id"] == worker.worker_id
        assert offer["queues"] == ["main"] and offer["free"] == 4  # the bounded queue: never

        run = await producer.trigger(note, {"n": 1})
        # Returned as written: leased to the worker, attempt 1, run.started recorded.
        assert run.status is RunStatus.RUNNING and run.attempt == 1
        assert run.lease is not None and run.lease.owner == worker.worker_id
        done = await wait_for_status(producer, run.id, RunStatus.SUCCEEDED)
        assert done.attempt == 1 and (run.id, 1) in SEEN
        events = await producer.runs.events(run.id)
        assert [e.type.value for e in events] == ["run.created", "run.started", "run.succeeded"]
        started = events[1].data
        assert started["attempt"] == 1 and started["worker_id"] == worker.worker_id
        assert datetime.fromisoformat(started["lease_expires_at"]) == run.lease.expires_at
        assert started["lease_expires_at"] == run.lease.expires_at.isoformat()
    # A stopped worker withdraws its offer.
    assert _offers(postgres_dsn, environment) == []


async def test_runs_a_claim_would_treat_specially_are_never_handed_off(
    runtime: Factory, postgres_dsn: str, environment: str
) -> None:
    consumer, producer = runtime(), runtime()
    async with _idle_worker(consumer):
        await _standing_by(postgres_dsn, environment)
        later = await producer.trigger(note, None, delay="1h")
        keyed = await producer.trigger(note, None, concurrency_key="k")
        idempotent = await producer.trigger(note, None, idempotency_key="once")
        limited = await producer.trigger(note_bounded, None)
        batch = await producer.trigger_many(note, [None, None])
        assert later.status is RunStatus.SCHEDULED
        for run in (keyed, idempotent, limited, *batch):
            assert run.status is RunStatus.QUEUED and run.lease is None
        # They ran after a claim woken by the environment's notification instead.
        for run in (keyed, idempotent, limited, *batch):
            done = await wait_for_status(producer, run.id, RunStatus.SUCCEEDED)
            events = [e.type.value for e in await producer.runs.events(done.id)]
            assert events == ["run.created", "run.started", "run.succeeded"]


async def test_a_run_whose_hand_off_was_not_heard_starts_when_the_offer_is_withdrawn(
    runtime: Factory, postgres_dsn: str, environment: str
) -> None:
    consumer, producer = runtime(), runtime()
    await consumer.open()
    storage = consumer.storage
    assert isinstance(storage, PostgresStorage)
    started: list[Run] = []
    offer = await storage.stand_by(environment, "w-1", ["main"], 3, 30.0, started.extend)
    assert offer is not None
    # Too large for a notification: the worker hears only the id.
    large = await producer.trigger(note, {"blob": "x" * 9000})
    small = await producer.trigger(note, {"n": 2})
    await _eventually(lambda: bool(started))
    assert [run.id for run in started] == [small.id]
    assert started[0] == await producer.runs.get(small.id)  # the row, decoded as a claim would
    assert large.status is RunStatus.RUNNING and large.lease is not None
    assert _offers(postgres_dsn, environment)[0]["free"] == 1

    rest = await storage.stand_down(environment, offer)
    assert [run.id for run in rest] == [large.id]
    assert rest[0] == await producer.runs.get(large.id)
    assert rest[0].payload == {"blob": "x" * 9000}
    assert _offers(postgres_dsn, environment) == []
    # Withdrawn: the next trigger is queued for claims as usual.
    after = await producer.trigger(note, None)
    assert after.status is RunStatus.QUEUED


async def test_a_stopping_worker_still_runs_a_run_handed_to_it_unheard(
    runtime: Factory, postgres_dsn: str, environment: str
) -> None:
    consumer, producer = runtime(), runtime()
    worker = consumer.worker(concurrency=4, mode=WorkerMode.POLL, poll_interval="30s")
    running = asyncio.ensure_future(worker.run())
    offer = await _standing_by(postgres_dsn, environment)
    storage = consumer.storage
    assert isinstance(storage, PostgresStorage) and storage._listener is not None
    # As if the notification were lost: the run is handed over, the worker hears nothing.
    storage._listener.forget(offer["lease_token"])
    run = await producer.trigger(note, None)
    assert run.status is RunStatus.RUNNING
    await worker.stop()
    await running
    # Withdrawing its offer found the run; with a slot free it ran it (as it runs a run
    # claimed by a settle in flight when it stopped) before it returned.
    back = await producer.runs.get(run.id)
    assert back.status is RunStatus.SUCCEEDED and back.attempt == 1
    assert SEEN.count((run.id, 1)) == 1
    events = [e.type for e in await producer.runs.events(run.id)]
    assert events == [RunEventType.CREATED, RunEventType.STARTED, RunEventType.SUCCEEDED]
    assert _offers(postgres_dsn, environment) == []


async def _app_worker(postgres_dsn: str, environment: str) -> asyncio.subprocess.Process:
    """A worker process of the multi-process tests' app (2 slots, 5 s leases, a 30 s
    poll)."""
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(worker_app.LOG_TABLE)
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "RUNLANE_APP_DSN": postgres_dsn,
        "RUNLANE_APP_ENV": environment,
        "RUNLANE_APP_CONCURRENCY": "2",
        # Idle, it stands by and keeps its offer: nothing wakes it to withdraw it.
        "RUNLANE_APP_POLL_INTERVAL": "30s",
    }
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.support.worker_app", "worker", cwd=ROOT, env=env
    )


async def _free_lock(postgres_dsn: str, lock_key: int) -> None:
    """Wait until the server has seen a killed worker's connection go (its lock is free)."""
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:

        def free() -> bool:
            row = conn.execute("SELECT pg_try_advisory_lock_shared(%s)", (lock_key,)).fetchone()
            return bool(row and row[0])

        await _eventually(free)
        conn.execute("SELECT pg_advisory_unlock_shared(%s)", (lock_key,))


async def test_an_offer_whose_worker_was_killed_is_never_taken(
    runtime: Factory, postgres_dsn: str, environment: str
) -> None:
    proc = await _app_worker(postgres_dsn, environment)
    try:
        dead = await _standing_by(postgres_dsn, environment, within=30)
    finally:
        proc.send_signal(signal.SIGKILL)
        await proc.wait()
    await _free_lock(postgres_dsn, dead["lock_key"])
    assert _offers(postgres_dsn, environment)[0]["lock_key"] == dead["lock_key"]

    app = runtime()
    run = await app.trigger(note, None)
    assert run.status is RunStatus.QUEUED  # not handed to the dead worker
    # tick removes the dead offer (a live one stays); a live worker runs the run once.
    assert (await app.tick()).offers_removed == 1
    assert _offers(postgres_dsn, environment) == []
    async with _idle_worker(app):
        await wait_for_status(app, run.id, RunStatus.SUCCEEDED)
        await _standing_by(postgres_dsn, environment)
        assert (await app.tick()).offers_removed == 0
        assert len(_offers(postgres_dsn, environment)) == 1
    assert SEEN.count((run.id, 1)) == 1


async def test_a_run_handed_to_a_worker_killed_before_starting_it_is_recovered_by_tick(
    runtime: Factory, postgres_dsn: str, environment: str
) -> None:
    proc = await _app_worker(postgres_dsn, environment)
    try:
        offer = await _standing_by(postgres_dsn, environment, within=30)
        # Frozen: its connection (and lock) live on, but it hears nothing.
        proc.send_signal(signal.SIGSTOP)
        app = runtime()
        run = await app.trigger(note, None)
        assert run.status is RunStatus.RUNNING and run.lease is not None
        assert run.lease.owner == offer["worker_id"]
    finally:
        proc.send_signal(signal.SIGKILL)
        await proc.wait()
    await _free_lock(postgres_dsn, offer["lock_key"])
    orphaned = await app.runs.get(run.id)
    assert orphaned.status is RunStatus.RUNNING and orphaned.attempt == 1
    # The app's lease is 5 s: past it, tick recovers the run like any expired lease.
    assert run.lease.expires_at - run.created_at == timedelta(seconds=5)
    await asyncio.sleep(max(0.0, (run.lease.expires_at - datetime.now(UTC)).total_seconds()) + 0.1)
    report = await app.tick()
    assert report.leases_recovered == 1 and report.offers_removed == 1
    assert (await app.runs.get(run.id)).status is RunStatus.RETRYING
    done = None
    for _ in range(100):
        done = await app.execute_next()
        if done is not None:
            break
        await asyncio.sleep(0.05)
    assert done is not None and done.id == run.id
    assert done.status is RunStatus.SUCCEEDED and done.attempt == 2
    events = [e.type for e in await app.runs.events(run.id)]
    assert events.count(RunEventType.LEASE_EXPIRED) == 1
    assert SEEN.count((run.id, 2)) == 1 and (run.id, 1) not in SEEN


async def test_a_producer_that_found_no_offer_skips_looking_for_a_moment(
    runtime: Factory, postgres_dsn: str, environment: str
) -> None:
    consumer, producer = runtime(), runtime()
    first = await producer.trigger(note, None)  # nobody stands by yet
    assert first.status is RunStatus.QUEUED
    storage = producer.storage
    assert isinstance(storage, PostgresStorage)
    assert (environment, "main") in storage._no_offer_until
    async with _idle_worker(consumer):
        await wait_for_status(producer, first.id, RunStatus.SUCCEEDED)
        await _standing_by(postgres_dsn, environment)
        # Inside the window the cheaper statement goes out: queued, as without offers.
        storage._no_offer_until[environment, "main"] = float("inf")
        skipped = await producer.trigger(note, None)
        assert skipped.status is RunStatus.QUEUED
        # Past it, the trigger looks again and hands the run over.
        await wait_for_status(producer, skipped.id, RunStatus.SUCCEEDED)
        await _standing_by(postgres_dsn, environment)
        storage._no_offer_until.clear()
        handed = await producer.trigger(note, None)
        assert handed.status is RunStatus.RUNNING
        await wait_for_status(producer, handed.id, RunStatus.SUCCEEDED)


async def test_a_worker_on_a_lane_with_a_transport_never_stands_by(
    postgres_dsn: str, environment: str
) -> None:
    # Its triggers ask the transport to wake a worker (delivery requests): none hands off.
    rl = Runlane(
        lane=Lane(PostgresStorage(postgres_dsn), transport=MemoryTransport([main])),
        queues=[main],
        tasks=[note],
        environment=environment,
    )
    await rl.migrate()
    try:
        worker = rl.worker(concurrency=2, mode=WorkerMode.POLL, poll_interval="50ms")
        assert worker.hand_offs is False
        running = asyncio.ensure_future(worker.run())
        run = await rl.trigger(note, None)
        assert run.status is RunStatus.QUEUED
        await wait_for_status(rl, run.id, RunStatus.SUCCEEDED)
        await asyncio.sleep(0.3)  # idle for several polls: it never offered its slots
        assert _offers(postgres_dsn, environment) == []
        await worker.stop()
        await running
    finally:
        await rl.close()
