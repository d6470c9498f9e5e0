"""Leases, fencing and recovery of lost workers."""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest

from runlane import (
    Context,
    ManualClock,
    Runlane,
    RunStatus,
    WorkerMode,
    task,
)
from runlane.ports.storage import LeaseRequest, QueuePolicy
from runlane.ports.transport import IgnoredReason
from runlane.testing.conformance.storage.support import (
    Factory,
    _all_runs,
    _event_types,
    _message,
    _recorder,
)
from runlane.types.runs import Run


async def test_claims_never_hand_one_run_to_two_workers(make_runtime: Factory) -> None:
    _, record = _recorder()
    first = await make_runtime([record])
    second = await make_runtime([record])
    await first.trigger_many(record, [{"order_id": i} for i in range(300)])
    policies = [QueuePolicy("main")]

    async def claim_all(rl: Runlane, worker: str) -> list[str]:
        ids: list[str] = []
        while True:
            lease = LeaseRequest(worker, rl.clock.now() + timedelta(seconds=30))
            batch = await rl.storage.claim_due_runs(
                rl.environment, policies, 7, lease, rl.clock.now()
            )
            if not batch:
                return ids
            ids.extend(run.id for run in batch)

    a, b = await asyncio.gather(claim_all(first, "worker-a"), claim_all(second, "worker-b"))
    assert not set(a) & set(b)
    assert len(a) + len(b) == 300


async def test_an_expired_lease_is_recovered_by_tick_and_counts_as_a_failed_attempt(
    make_runtime: Factory,
) -> None:
    clock = ManualClock()
    _, record = _recorder()
    rl = await make_runtime([record], clock=clock)
    run = await rl.trigger(record, {"order_id": 1})
    lease = LeaseRequest("ghost-worker", clock.now() + timedelta(seconds=30))
    (claimed,) = await rl.storage.claim_due_runs(
        rl.environment, [QueuePolicy("main")], 1, lease, clock.now()
    )
    assert claimed.status is RunStatus.RUNNING and claimed.lease is not None
    assert (await rl.tick()).leases_recovered == 0
    clock.advance("31s")
    report = await rl.tick()
    assert report.leases_recovered == 1
    recovered = await rl.runs.get(run.id)
    assert recovered.status is RunStatus.RETRYING and recovered.lease is None
    assert recovered.failure is not None and recovered.failure.code == "lease_expired"
    assert "run.lease_expired" in await _event_types(rl, run.id)
    clock.advance("5m")
    done = await rl.execute_next()
    assert done is not None and done.status is RunStatus.SUCCEEDED and done.attempt == 2
    assert (await rl.tick()).leases_recovered == 0


async def test_a_worker_that_lost_its_lease_cannot_write_an_outcome(make_runtime: Factory) -> None:
    clock = ManualClock()
    _, record = _recorder()
    rl = await make_runtime([record], clock=clock)
    run = await rl.trigger(record, {"order_id": 1})
    lease = LeaseRequest("slow-worker", clock.now() + timedelta(seconds=30))
    (stale,) = await rl.storage.claim_due_runs(
        rl.environment, [QueuePolicy("main")], 1, lease, clock.now()
    )
    clock.advance("31s")
    await rl.tick()
    clock.advance("5m")
    fresh = await rl.execute_next()
    assert fresh is not None and fresh.status is RunStatus.SUCCEEDED
    from runlane.model.transitions import Succeeded, settle_attempt

    late = settle_attempt(stale, Succeeded("late"), record.retry, clock.now())
    assert await rl.storage.apply_transitions(rl.environment, [late], clock.now()) == [False]
    assert stale.lease is not None
    beat = await rl.storage.heartbeat(
        rl.environment, run.id, stale.lease.token, clock.now() + timedelta(seconds=30), clock.now()
    )
    assert beat is None
    assert (await rl.runs.get(run.id)).result == {"order_id": 1, "attempt": 2}


async def test_concurrent_ticks_recover_each_expired_lease_once(make_runtime: Factory) -> None:
    clock = ManualClock()
    _, record = _recorder()
    runtimes = [await make_runtime([record], clock=clock) for _ in range(3)]
    await runtimes[0].trigger_many(record, [{"order_id": i} for i in range(20)])
    lease = LeaseRequest("ghost", clock.now() + timedelta(seconds=30))
    await runtimes[0].storage.claim_due_runs(
        runtimes[0].environment, [QueuePolicy("main")], 20, lease, clock.now()
    )
    clock.advance("1m")
    reports = await asyncio.gather(*(rl.tick() for rl in runtimes))
    assert sum(r.leases_recovered for r in reports) == 20
    for run in await _all_runs(runtimes[0]):
        types = await _event_types(runtimes[0], run.id)
        assert types.count("run.lease_expired") == 1


async def test_wakeups_racing_workers_for_the_same_runs_execute_each_run_once(
    make_runtime: Factory,
) -> None:
    executed: Counter[str] = Counter()

    @task("race.once")
    async def once(payload: Any, ctx: Context) -> int:
        executed[ctx.run_id] += 1
        await asyncio.sleep(0.02)
        return ctx.attempt

    worker_side = await make_runtime([once])
    delivery_side = await make_runtime([once])
    runs = await worker_side.trigger_many(once, [None] * 30)
    worker = worker_side.worker(mode=WorkerMode.DRAIN, concurrency=2, handle_signals=False)

    async def wake_later(run: Run, delay: float) -> Any:
        await asyncio.sleep(delay)
        return await delivery_side.execute_delivery(_message(delivery_side, run))

    # Two wakeups per run (a duplicate delivery), spread at random over the drain
    # (about 0.3 s), race the worker's batch claims for runs waiting, running and done.
    wakeups = [
        (run, random.Random(f"{run.id}{copy}").uniform(0, 0.3)) for run in runs for copy in (1, 2)
    ]
    results, _ = await asyncio.gather(
        asyncio.gather(*(wake_later(run, delay) for run, delay in wakeups)), worker.run()
    )

    assert executed == Counter({run.id: 1 for run in runs})
    for result in results:
        assert result.executed or result.reason in (
            IgnoredReason.ALREADY_LEASED,
            IgnoredReason.TERMINAL,
        ), result
    for run in runs:
        assert (await worker_side.runs.get(run.id)).status is RunStatus.SUCCEEDED
        assert await _event_types(worker_side, run.id) == [
            "run.created",
            "run.started",
            "run.succeeded",
        ]


__all__ = [name for name in dir() if name.startswith("test_")]
pytestmark = pytest.mark.asyncio
