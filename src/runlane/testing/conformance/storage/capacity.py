"""Durable queue capacity: bounded queues and concurrency keys."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import pytest

from runlane import (
    Context,
    ManualClock,
    RetryPolicy,
    Runlane,
    RunStatus,
    WorkerMode,
    queue,
    task,
)
from runlane.ports.storage import LeaseRequest
from runlane.testing.conformance.storage.support import (
    MAIN,
    Factory,
    _recorder,
)
from runlane.types.runs import Run

LIMITED = queue("limited", concurrency_limit=2)
SERIAL = queue("serial", concurrency_limit=1)


async def _claim(
    rl: Runlane, queues: Sequence[Any], limit: int = 10, lease: str = "30s"
) -> list[Run]:
    policies = rl.registry.policies_for(queues)
    request = LeaseRequest("claimer", rl.clock.now() + timedelta(seconds=float(lease.rstrip("s"))))
    return await rl.storage.claim_due_runs(rl.environment, policies, limit, request, rl.clock.now())


async def test_a_bounded_queue_never_runs_more_than_its_limit(make_runtime: Factory) -> None:
    active = 0
    peak = 0

    @task("limited.work", queue=LIMITED)
    async def work(payload: Any, ctx: Context) -> None:
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        await asyncio.sleep(0.01)
        active -= 1

    rl = await make_runtime([work], queues=[MAIN, LIMITED])
    await rl.trigger_many(work, [None] * 30)
    await rl.worker(mode=WorkerMode.DRAIN, concurrency=10, handle_signals=False).run()
    assert peak == 2
    stats = next(s for s in await rl.queue_stats() if s.queue == "limited")
    assert stats.counts == {RunStatus.SUCCEEDED: 30} and stats.occupied == 0


async def test_concurrency_keys_partition_a_bounded_queue(make_runtime: Factory) -> None:
    _, record = _recorder()
    rl = await make_runtime([record], queues=[MAIN, SERIAL])
    for key in ("a", "a", "b", "b", "c"):
        await rl.trigger(record, {"order_id": 1}, queue=SERIAL, concurrency_key=key)
    first = await _claim(rl, [SERIAL])
    assert sorted(r.concurrency_key or "" for r in first) == ["a", "b", "c"]
    assert await _claim(rl, [SERIAL]) == []
    stats = {s.concurrency_key: s for s in await rl.queue_stats() if s.queue == "serial"}
    assert (
        stats["a"].occupied == 1 and stats["a"].waiting == 1 and stats["a"].concurrency_limit == 1
    )


@pytest.mark.parametrize("keyed_runs", [1, 70, 1001], ids=["lone", "batch", "stream"])
async def test_a_keyed_run_behind_a_full_partitions_backlog_is_claimed(
    make_runtime: Factory, keyed_runs: int
) -> None:
    """A driver may read a bounded queue's due runs only as far as its limit while no
    run of it has had a concurrency key; the first keyed run, however it was written
    (alone, in a batch, in a bulk call of many batches), must still be found behind
    the backlog of a partition that is full."""
    _, record = _recorder()
    rl = await make_runtime([record], queues=[MAIN, SERIAL])
    await rl.trigger_many(record, [{"order_id": i} for i in range(5)], queue=SERIAL)
    (unkeyed,) = await _claim(rl, [SERIAL])
    assert unkeyed.concurrency_key is None
    assert await _claim(rl, [SERIAL]) == []
    payloads = [{"order_id": 100 + i} for i in range(keyed_runs)]
    if keyed_runs == 1:
        await rl.trigger(record, payloads[0], queue=SERIAL, concurrency_key="k")
    else:
        await rl.trigger_many(record, payloads, queue=SERIAL, concurrency_key="k")
    (keyed,) = await _claim(rl, [SERIAL])
    assert keyed.concurrency_key == "k"
    assert await _claim(rl, [SERIAL]) == []


async def test_an_unbounded_queue_keeps_but_ignores_the_concurrency_key(
    make_runtime: Factory,
) -> None:
    _, record = _recorder()
    rl = await make_runtime([record])
    for _ in range(3):
        await rl.trigger(record, {"order_id": 1}, concurrency_key="same")
    claimed = await _claim(rl, [MAIN])
    assert len(claimed) == 3 and {r.concurrency_key for r in claimed} == {"same"}


async def test_an_expired_lease_frees_capacity_even_before_tick(make_runtime: Factory) -> None:
    clock = ManualClock()
    _, record = _recorder()
    rl = await make_runtime([record], queues=[MAIN, SERIAL], clock=clock)
    await rl.trigger_many(record, [{"order_id": i} for i in range(2)], queue=SERIAL)
    (held,) = await _claim(rl, [SERIAL])
    assert await _claim(rl, [SERIAL]) == []
    assert [s.occupied for s in await rl.queue_stats() if s.queue == "serial"] == [1]
    clock.advance("31s")
    assert [s.occupied for s in await rl.queue_stats() if s.queue == "serial"] == [0]
    (next_run,) = await _claim(rl, [SERIAL])
    assert next_run.id != held.id
    assert held.lease is not None
    revived = await rl.storage.heartbeat(
        rl.environment, held.id, held.lease.token, clock.now() + timedelta(seconds=30), clock.now()
    )
    assert revived is None


@pytest.mark.parametrize("ending", ["succeed", "fail", "release", "cancel"])
async def test_every_way_an_attempt_ends_frees_its_capacity(
    make_runtime: Factory, ending: str
) -> None:
    clock = ManualClock()
    started = asyncio.Event()
    proceed = asyncio.Event()

    @task(
        "serial.work",
        queue=SERIAL,
        retry=RetryPolicy(max_attempts=2, initial_delay="1h", max_delay="1h"),
    )
    async def work(payload: Any, ctx: Context) -> Any:
        if payload == "first":
            started.set()
            await proceed.wait()
            if ending == "fail":
                raise RuntimeError("boom")
            if ending == "release":
                return ctx.release("1h")
        return None

    rl = await make_runtime([work], queues=[MAIN, SERIAL], clock=clock)
    first = await rl.trigger(work, "first")
    second = await rl.trigger(work, "second")
    executing = asyncio.create_task(rl.execute_next())
    await asyncio.wait_for(started.wait(), 5)
    assert await _claim(rl, [SERIAL]) == []
    if ending == "cancel":
        await rl.runs.cancel(first.id)
    proceed.set()
    await executing
    done = await rl.execute_next()
    assert done is not None and done.id == second.id and done.status is RunStatus.SUCCEEDED
    stats = next(s for s in await rl.queue_stats() if s.queue == "serial")
    assert stats.occupied == 0


async def test_execute_next_respects_capacity_held_by_other_workers(make_runtime: Factory) -> None:
    _, record = _recorder()
    rl = await make_runtime([record], queues=[MAIN, SERIAL])
    runs = await rl.trigger_many(record, [{"order_id": i} for i in range(2)], queue=SERIAL)
    (held,) = await _claim(rl, [SERIAL])
    assert await rl.execute_next(queues=[SERIAL]) is None
    (waiting,) = [run for run in runs if run.id != held.id]
    assert (await rl.runs.get(waiting.id)).status is RunStatus.QUEUED
    assert (await rl.runs.get(held.id)).status is RunStatus.RUNNING


__all__ = [name for name in dir() if name.startswith("test_")]
pytestmark = pytest.mark.asyncio
