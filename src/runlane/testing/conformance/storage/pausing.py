"""Pausing a queue (SPEC-flow 7.3) through the runtime: ``rl.queues.pause``,
``resume`` and ``list``; workers of other runtimes honour a pause, running runs
finish, triggers are accepted, maintenance goes on, and on a transport lane the
paused queue's wakeups are ignored until ``resume`` requests them again."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

from runlane import (
    Context,
    ErrorCode,
    ManualClock,
    RunlaneError,
    RunStatus,
    WorkerMode,
    task,
)
from runlane.ports.storage import LeaseRequest
from runlane.ports.transport import DeliveryOutcome, IgnoredReason
from runlane.testing.conformance.storage.support import (
    MAIN,
    OTHER,
    Factory,
    Order,
    TransportFactory,
    _recorder,
)

#: Poll interval of the workers in these tests; a pause must stop them within one.
POLL = 0.05


async def _wait_until_terminal(rl: Any, run_ids: list[str]) -> None:
    async with asyncio.timeout(20):
        while True:
            runs = [await rl.runs.get(run_id) for run_id in run_ids]
            if all(run.is_terminal for run in runs):
                return
            await asyncio.sleep(POLL)


async def test_a_paused_queue_starts_no_run_yet_accepts_triggers_until_resumed(
    make_runtime: Factory,
) -> None:
    seen, record = _recorder()
    rl = await make_runtime([record])
    paused = await rl.queues.pause(MAIN, reason="partner incident")
    assert (paused.name, paused.paused, paused.paused_reason) == ("main", True, "partner incident")
    waiting = await rl.trigger(record, {"order_id": 1})
    elsewhere = await rl.trigger(record, {"order_id": 2}, queue=OTHER)
    # Only the other queue's run starts; the paused queue's run keeps its place and attempt.
    started = await rl.execute_next()
    assert started is not None and started.id == elsewhere.id
    assert await rl.execute_next() is None
    assert await rl.execute_next(queues=[MAIN]) is None
    still = await rl.runs.get(waiting.id)
    assert (still.status, still.attempt) == (RunStatus.QUEUED, 0)
    resumed = await rl.queues.resume("main")
    assert (resumed.paused, resumed.paused_at) == (False, None)
    done = await rl.execute_next()
    assert done is not None and done.id == waiting.id and done.status is RunStatus.SUCCEEDED
    assert [order.order_id for order in seen] == [2, 1]


async def test_queues_list_shows_each_registered_queue_with_its_pause(
    make_runtime: Factory,
) -> None:
    _, record = _recorder()
    clock = ManualClock()
    rl = await make_runtime([record], clock=clock)
    await rl.queues.pause("other")
    await rl.queues.pause("other", reason="a second pause keeps the first")
    items = await rl.queues.list()
    assert [(q.name, q.paused, q.paused_reason) for q in items] == [
        ("main", False, None),
        ("other", True, None),
    ]
    assert items[1].paused_at == clock.now() and items[0].paused_at is None
    # rl.queues stays the read-only mapping of registered queues.
    assert (
        "main" in rl.queues
        and rl.queues["other"] is OTHER
        and sorted(rl.queues)
        == [
            "main",
            "other",
        ]
    )


async def test_pausing_an_unknown_queue_or_with_a_bad_reason_stores_nothing(
    make_runtime: Factory,
) -> None:
    _, record = _recorder()
    rl = await make_runtime([record])
    with pytest.raises(RunlaneError) as unknown:
        await rl.queues.pause("nope")
    assert unknown.value.code is ErrorCode.QUEUE_NOT_FOUND
    with pytest.raises(RunlaneError) as unknown_resume:
        await rl.queues.resume("nope")
    assert unknown_resume.value.code is ErrorCode.QUEUE_NOT_FOUND
    for reason in (7, "x" * 501, "nul\x00"):
        with pytest.raises(RunlaneError) as bad:
            await rl.queues.pause("main", reason=reason)  # type: ignore[arg-type]
        assert bad.value.code is ErrorCode.CONFIGURATION_INVALID
    assert await rl.storage.list_queue_pauses(rl.environment) == []
    assert not any(q.paused for q in await rl.queues.list())


async def test_a_pause_is_stored_so_a_new_runtime_honours_it(make_runtime: Factory) -> None:
    _, record = _recorder()
    first = await make_runtime([record])
    await first.queues.pause("main", reason="deploy")
    run = await first.trigger(record, {"order_id": 1})
    await first.close()
    restarted = await make_runtime([record])
    (main, _) = await restarted.queues.list()
    assert (main.paused, main.paused_reason) == (True, "deploy")
    assert await restarted.execute_next() is None
    await restarted.queues.resume("main")
    done = await restarted.execute_next()
    assert done is not None and done.id == run.id


async def test_a_pause_from_another_runtime_stops_every_polling_worker_and_resume_restarts_them(
    make_runtime: Factory,
) -> None:
    _, record = _recorder()
    workers_a = await make_runtime([record])
    workers_b = await make_runtime([record])
    operator = await make_runtime([record])
    workers = [
        rl.worker(mode=WorkerMode.POLL, poll_interval=POLL, handle_signals=False, maintenance=False)
        for rl in (workers_a, workers_b)
    ]
    running = [asyncio.create_task(worker.run()) for worker in workers]
    try:
        before = await operator.trigger(record, {"order_id": 0})
        await _wait_until_terminal(operator, [before.id])
        await operator.queues.pause("main")
        # Ten poll intervals: every worker has read the pause several times over.
        await asyncio.sleep(10 * POLL)
        held = [(await operator.trigger(record, {"order_id": n})).id for n in range(1, 6)]
        other = await operator.trigger(record, {"order_id": 9}, queue=OTHER)
        await _wait_until_terminal(operator, [other.id])
        await asyncio.sleep(5 * POLL)
        waiting = [await operator.runs.get(run_id) for run_id in held]
        assert {(run.status, run.attempt) for run in waiting} == {(RunStatus.QUEUED, 0)}
        await operator.queues.resume("main")
        await _wait_until_terminal(operator, held)
        assert {(await operator.runs.get(run_id)).status for run_id in held} == {
            RunStatus.SUCCEEDED
        }
    finally:
        for worker in workers:
            await worker.stop()
        await asyncio.gather(*running)


async def test_a_run_already_running_when_its_queue_is_paused_finishes(
    make_runtime: Factory,
) -> None:
    started = asyncio.Event()
    finish = asyncio.Event()

    @task("orders.slow", schema=Order)
    async def slow(payload: Order, ctx: Context) -> int:
        started.set()
        await finish.wait()
        return payload.order_id

    rl = await make_runtime([slow])
    run = await rl.trigger(slow, {"order_id": 3})
    attempt = asyncio.create_task(rl.execute_next())
    await started.wait()
    await rl.queues.pause("main")
    finish.set()
    settled = await attempt
    assert settled is not None and settled.id == run.id and settled.status is RunStatus.SUCCEEDED
    assert settled.result == 3


async def test_maintenance_goes_on_while_a_queue_is_paused(make_runtime: Factory) -> None:
    clock = ManualClock()
    _, record = _recorder()
    rl = await make_runtime([record], clock=clock)
    run = await rl.trigger(record, {"order_id": 1})
    lease = LeaseRequest("gone-worker", clock.now() + timedelta(seconds=30))
    assert await rl.storage.claim_run(rl.environment, run.id, lease, clock.now()) is not None
    await rl.queues.pause("main")
    clock.advance("1m")
    report = await rl.tick()
    assert report.leases_recovered == 1
    recovered = await rl.runs.get(run.id)
    assert recovered.status is RunStatus.RETRYING and recovered.attempt == 1
    clock.advance("1h")
    assert await rl.execute_next() is None
    await rl.queues.resume("main")
    done = await rl.execute_next()
    assert done is not None and done.id == run.id and done.attempt == 2


async def test_on_a_transport_lane_a_paused_queues_wakeups_are_ignored_until_resume_requests_them(
    make_transport_runtime: TransportFactory,
) -> None:
    clock = ManualClock()
    _, record = _recorder()
    rl, transport = await make_transport_runtime([record], clock=clock)
    await rl.queues.pause("main")
    run = await rl.trigger(record, {"order_id": 1})
    (wakeup,) = transport.published
    ignored = await rl.execute_delivery(wakeup.message)
    assert (ignored.outcome, ignored.reason) == (
        DeliveryOutcome.IGNORED,
        IgnoredReason.QUEUE_PAUSED,
    )
    assert (await rl.runs.get(run.id)).attempt == 0
    # Maintenance does not wake a paused queue's runs (each wakeup would be ignored).
    clock.advance("10m")
    report = await rl.tick()
    assert (report.deliveries_requested, report.outbox_published) == (0, 0)
    assert len(transport.published) == 1
    await rl.queues.resume("main")
    assert [a.message.run_id for a in transport.published] == [run.id, run.id]
    result = await rl.execute_delivery(transport.published[-1].message)
    assert result.outcome is DeliveryOutcome.EXECUTED
    assert result.run is not None and result.run.status is RunStatus.SUCCEEDED


__all__ = [name for name in dir() if name.startswith("test_")]
