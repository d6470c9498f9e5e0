"""Cancellation, before and during an attempt."""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest

from runlane import (
    Context,
    ErrorCode,
    ManualClock,
    Runlane,
    RunlaneError,
    RunStatus,
    SignalReason,
    WorkerMode,
    task,
)
from runlane.ports.storage import LeaseRequest, QueuePolicy
from runlane.testing.conformance.storage.support import (
    Factory,
    _event_types,
    _recorder,
)
from runlane.types.runs import Run


async def test_cancelling_a_waiting_run_cancels_it_at_once(make_runtime: Factory) -> None:
    _, record = _recorder()
    rl = await make_runtime([record])
    run = await rl.trigger(record, {"order_id": 1}, delay="1h")
    cancelled = await rl.runs.cancel(run.id, reason="customer left")
    assert cancelled.status is RunStatus.CANCELLED and cancelled.cancel_reason == "customer left"
    assert await _event_types(rl, run.id) == ["run.created", "run.cancelled"]
    with pytest.raises(RunlaneError) as caught:
        await rl.runs.cancel(run.id)
    assert caught.value.code is ErrorCode.INVALID_STATE
    assert await rl.execute_next() is None


async def test_cancelling_a_running_run_signals_its_task_and_ends_cancelled(
    make_runtime: Factory,
) -> None:
    started = asyncio.Event()
    reasons: list[Any] = []

    @task("cancellable")
    async def cancellable(payload: Any, ctx: Context) -> str:
        started.set()
        reasons.append(await ctx.signal.wait())
        assert ctx.is_cancellation_requested()
        return "stopped early"

    rl = await make_runtime([cancellable])
    run = await rl.trigger(cancellable, None)
    worker = rl.worker(
        concurrency=1,
        lease_duration="3s",
        heartbeat_interval="100ms",
        handle_signals=False,
        mode=WorkerMode.DRAIN,
    )
    running = asyncio.create_task(worker.run())
    await asyncio.wait_for(started.wait(), 5)
    requested = await rl.runs.cancel(run.id, reason="operator")
    assert requested.status is RunStatus.CANCELLATION_REQUESTED
    await asyncio.wait_for(running, 5)
    assert reasons == [SignalReason.CANCELLED]
    final = await rl.runs.get(run.id)
    assert final.status is RunStatus.CANCELLED
    assert await _event_types(rl, run.id) == [
        "run.created",
        "run.started",
        "run.cancellation_requested",
        "run.cancelled",
    ]


async def test_tick_finishes_a_cancellation_whose_worker_died(make_runtime: Factory) -> None:
    clock = ManualClock()
    _, record = _recorder()
    rl = await make_runtime([record], clock=clock)
    run = await rl.trigger(record, {"order_id": 1})
    lease = LeaseRequest("dead-worker", clock.now() + timedelta(seconds=30))
    await rl.storage.claim_due_runs(rl.environment, [QueuePolicy("main")], 1, lease, clock.now())
    assert (await rl.runs.cancel(run.id)).status is RunStatus.CANCELLATION_REQUESTED
    clock.advance("31s")
    report = await rl.tick()
    assert report.cancellations_finished == 1
    assert (await rl.runs.get(run.id)).status is RunStatus.CANCELLED


async def _cancel_or_refused(rl: Runlane, run_id: str) -> Run | None:
    """The cancelled run, or ``None`` when the run had already finished (INVALID_STATE)."""
    try:
        return await rl.runs.cancel(run_id, reason="race")
    except RunlaneError as error:
        assert error.code is ErrorCode.INVALID_STATE, error
        return None


async def test_cancel_racing_completion_leaves_exactly_one_consistent_outcome(
    make_runtime: Factory,
) -> None:
    releases: dict[str, asyncio.Event] = {}

    @task("race.gated")
    async def gated(payload: Any, ctx: Context) -> str:
        await releases.setdefault(ctx.run_id, asyncio.Event()).wait()
        return "done"

    worker_side = await make_runtime([gated])
    operator = await make_runtime([gated])
    runs = await worker_side.trigger_many(gated, [None] * 20)
    worker = worker_side.worker(
        mode=WorkerMode.DRAIN, concurrency=20, heartbeat_interval="50ms", handle_signals=False
    )
    running = asyncio.create_task(worker.run())
    for _ in range(500):
        if len(releases) == len(runs):
            break
        await asyncio.sleep(0.01)
    assert len(releases) == len(runs), "every attempt should be running before the race"

    async def race(run: Run, offset: float) -> Run | None:
        # The cancel starts ``offset`` seconds after the task is let go (before, if negative).
        if offset < 0:
            cancel = asyncio.ensure_future(_cancel_or_refused(operator, run.id))
            await asyncio.sleep(-offset)
            releases[run.id].set()
            return await cancel
        releases[run.id].set()
        await asyncio.sleep(offset)
        return await _cancel_or_refused(operator, run.id)

    offsets = [(i - len(runs) / 2) * 0.002 for i in range(len(runs))]  # -20 ms to +18 ms
    await operator.runs.get(runs[0].id)  # connected before the race starts
    answers = [await race(run, offset) for run, offset in zip(runs, offsets, strict=True)]
    await asyncio.wait_for(running, 10)

    for run, answer in zip(runs, answers, strict=True):
        final = await operator.runs.get(run.id)
        events = await _event_types(operator, run.id)
        if answer is None:  # completion won: the cancel was refused and changed nothing
            assert final.status is RunStatus.SUCCEEDED and final.result == "done"
            assert events == ["run.created", "run.started", "run.succeeded"]
        else:  # the cancel won: however the attempt ended, the run ends cancelled
            assert answer.status is RunStatus.CANCELLATION_REQUESTED
            assert final.status is RunStatus.CANCELLED and final.cancel_reason == "race"
            assert events == [
                "run.created",
                "run.started",
                "run.cancellation_requested",
                "run.cancelled",
            ]
        assert final.lease is None


async def test_cancel_racing_claims_never_runs_a_run_cancelled_while_it_waited(
    make_runtime: Factory,
) -> None:
    executed: Counter[str] = Counter()

    @task("race.quick")
    async def quick(payload: Any, ctx: Context) -> None:
        executed[ctx.run_id] += 1
        await asyncio.sleep(0.02)

    worker_side = await make_runtime([quick])
    operator = await make_runtime([quick])
    runs = await worker_side.trigger_many(quick, [None] * 40)
    worker = worker_side.worker(mode=WorkerMode.DRAIN, concurrency=2, handle_signals=False)

    async def cancel_later(run: Run, delay: float) -> Run | None:
        await asyncio.sleep(delay)
        return await _cancel_or_refused(operator, run.id)

    # Cancels spread at random over the drain (about 0.4 s) catch runs waiting, running
    # and finished.
    delays = [random.Random(index).uniform(0, 0.4) for index in range(len(runs))]
    answers, _ = await asyncio.gather(
        asyncio.gather(*(cancel_later(run, d) for run, d in zip(runs, delays, strict=True))),
        worker.run(),
    )

    for run, answer in zip(runs, answers, strict=True):
        final = await operator.runs.get(run.id)
        if answer is None:
            assert final.status is RunStatus.SUCCEEDED and executed[run.id] == 1
        elif answer.status is RunStatus.CANCELLED:  # cancelled while it waited
            assert executed[run.id] == 0, "a run cancelled while waiting must never start"
            assert final.status is RunStatus.CANCELLED
            assert await _event_types(operator, run.id) == ["run.created", "run.cancelled"]
        else:
            assert answer.status is RunStatus.CANCELLATION_REQUESTED
            assert final.status is RunStatus.CANCELLED and executed[run.id] == 1
    assert max(executed.values(), default=0) <= 1


__all__ = [name for name in dir() if name.startswith("test_")]
pytestmark = pytest.mark.asyncio
