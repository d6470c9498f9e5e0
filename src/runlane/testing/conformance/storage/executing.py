"""Executing and settling attempts: results, failures, retries."""

from __future__ import annotations

import asyncio
import threading
from datetime import timedelta
from math import nan
from typing import Any

import pytest

from runlane import (
    Context,
    ErrorCode,
    ManualClock,
    RetryPolicy,
    RunlaneError,
    RunStatus,
    SignalReason,
    WorkerMode,
    task,
)
from runlane.testing import drain, wait_for_status
from runlane.testing.conformance.storage.support import (
    Factory,
    Order,
    _event_types,
    _recorder,
)
from runlane.types.runs import RunEventType, RunSourceType


async def test_execute_next_runs_one_attempt_and_stores_the_result(make_runtime: Factory) -> None:
    _, record = _recorder()
    rl = await make_runtime([record])
    run = await rl.trigger(record, {"order_id": 5})
    done = await rl.execute_next()
    assert done is not None and done.id == run.id
    assert done.status is RunStatus.SUCCEEDED and done.result == {"order_id": 5, "attempt": 1}
    assert done.lease is None and done.attempt == 1
    assert await _event_types(rl, run.id) == ["run.created", "run.started", "run.succeeded"]
    assert await rl.execute_next() is None


async def test_sync_task_functions_run_in_threads(make_runtime: Factory) -> None:
    threads: list[str] = []

    @task("sync.echo")
    def echo(payload: Any, ctx: Context) -> Any:
        threads.append(threading.current_thread().name)
        return payload

    rl = await make_runtime([echo])
    await rl.trigger(echo, [1, "two", {"three": 3}])
    (done,) = await drain(rl)
    assert done.result == [1, "two", {"three": 3}]
    assert threads and threads[0] != threading.main_thread().name


async def test_failures_retry_with_backoff_until_the_budget_is_spent(make_runtime: Factory) -> None:
    clock = ManualClock()

    @task("always.fails", retry=RetryPolicy(max_attempts=3, initial_delay="10s", max_delay="15s"))
    async def fails(payload: Any, ctx: Context) -> None:
        raise ValueError(f"secret-ish detail {ctx.attempt}")

    rl = await make_runtime([fails], clock=clock)
    run = await rl.trigger(fails, None)
    first = await rl.execute_next()
    assert first is not None and first.status is RunStatus.RETRYING
    assert first.failure is not None and first.failure.code == "task_failed"
    assert "ValueError" in first.failure.message and first.failure.retryable
    delay = (first.run_at - clock.now()).total_seconds()
    assert 5 <= delay <= 10
    assert await rl.execute_next() is None
    clock.advance("10s")
    second = await rl.execute_next()
    assert second is not None and second.status is RunStatus.RETRYING and second.attempt == 2
    assert 7.5 <= (second.run_at - clock.now()).total_seconds() <= 15
    clock.advance("15s")
    third = await rl.execute_next()
    assert third is not None and third.status is RunStatus.FAILED and third.attempt == 3
    assert await _event_types(rl, run.id) == [
        "run.created",
        "run.started",
        "run.retry_scheduled",
        "run.started",
        "run.retry_scheduled",
        "run.started",
        "run.failed",
    ]
    clock.advance("1h")
    assert await rl.execute_next() is None


async def test_a_non_retryable_runlane_error_fails_the_run_at_once(make_runtime: Factory) -> None:
    @task("fatal")
    async def fatal(payload: Any, ctx: Context) -> None:
        raise RunlaneError(ErrorCode.TASK_FAILED, "card declined", retryable=False, meta={"c": 1})

    rl = await make_runtime([fatal])
    await rl.trigger(fatal, None)
    done = await rl.execute_next()
    assert done is not None and done.status is RunStatus.FAILED
    assert done.failure is not None and done.failure.message == "card declined"
    # The task's meta is kept as given, next to the traceback every failed attempt keeps.
    assert done.failure.meta == {"c": 1, "traceback": done.failure.meta["traceback"]}
    assert "card declined" in done.failure.meta["traceback"]


@pytest.mark.parametrize("value", ["hello", 42, 2.5, True, None, [1, "two"], {"k": ["v"]}])
async def test_any_json_value_round_trips_as_payload_and_result(
    make_runtime: Factory, value: Any
) -> None:
    @task("echo.value")
    async def echo(payload: Any, ctx: Context) -> Any:
        return payload

    rl = await make_runtime([echo])
    run = await rl.trigger(echo, value)
    assert (await rl.runs.get(run.id)).payload == value
    (done,) = await drain(rl)
    assert done.result == value and done.payload == value
    stored = await rl.runs.get(run.id)
    assert stored.result == value and stored.status is RunStatus.SUCCEEDED


async def test_values_storage_cannot_keep_fail_only_their_own_run(
    make_runtime: Factory,
) -> None:
    @task("nul.mixed")
    async def mixed(payload: int, ctx: Context) -> Any:
        if payload == 3:
            return {"text": "a\x00b"}
        if payload == 5:
            raise ValueError("bad \x00 byte")
        if payload == 7:
            return ctx.release("1h", reason="wait \x00")
        if payload == 8:
            return ["\udc80"]
        if payload == 6:
            raise RunlaneError(ErrorCode.TASK_FAILED, "odd meta", meta={"o": object(), "f": nan})
        return payload

    rl = await make_runtime([mixed])
    runs = await rl.trigger_many(mixed, list(range(10)))
    # One worker settles all ten together: a value storage refuses must not fail the rest.
    await rl.worker(mode=WorkerMode.DRAIN, concurrency=10, handle_signals=False).run()
    stored = {r.payload: await rl.runs.get(r.id) for r in runs}
    assert stored[3].status is RunStatus.FAILED and stored[3].failure is not None
    assert "NUL" in stored[3].failure.message and not stored[3].failure.retryable
    assert stored[5].status is RunStatus.RETRYING and stored[5].failure is not None
    assert stored[5].failure.meta["detail"] == "bad \ufffd byte"
    assert stored[7].status is RunStatus.RELEASED
    assert stored[8].status is RunStatus.FAILED and stored[8].failure is not None
    assert "surrogate" in stored[8].failure.message
    assert stored[6].status is RunStatus.FAILED and stored[6].failure is not None
    assert stored[6].failure.meta["f"] == "nan" and stored[6].failure.meta["o"].startswith("<")
    others = [stored[n] for n in (0, 1, 2, 4, 9)]
    assert all(r.status is RunStatus.SUCCEEDED and r.result == r.payload for r in others)
    with pytest.raises(RunlaneError) as caught:
        await rl.runs.cancel(runs[0].id, reason="stop \x00")
    assert caught.value.code is ErrorCode.CONFIGURATION_INVALID


async def test_release_waits_and_runs_again_without_spending_retries(make_runtime: Factory) -> None:
    clock = ManualClock()

    @task("polls", retry=RetryPolicy(max_attempts=1))
    async def polls(payload: Any, ctx: Context) -> Any:
        if ctx.attempt < 3:
            return ctx.release("30s", reason="not ready")
        return "ready"

    rl = await make_runtime([polls], clock=clock)
    run = await rl.trigger(polls, None)
    first = await rl.execute_next()
    assert first is not None and first.status is RunStatus.RELEASED
    assert first.run_at == clock.now() + timedelta(seconds=30)
    assert first.failure_count == 0
    assert await rl.execute_next() is None
    clock.advance("30s")
    second = await rl.execute_next()
    assert second is not None and second.status is RunStatus.RELEASED
    clock.advance("30s")
    third = await rl.execute_next()
    assert third is not None and third.status is RunStatus.SUCCEEDED and third.result == "ready"
    events = await rl.runs.events(run.id)
    released = [e for e in events if e.type is RunEventType.RELEASED]
    assert len(released) == 2 and released[0].data["reason"] == "not ready"


async def test_the_handler_gets_a_revalidated_payload(make_runtime: Factory) -> None:
    seen, record = _recorder()
    rl = await make_runtime([record])
    await rl.trigger(record, {"order_id": "12"})
    await drain(rl)
    assert seen == [Order(order_id=12)]


async def test_a_task_timeout_fails_the_attempt_and_signals_the_task(make_runtime: Factory) -> None:
    reasons: list[Any] = []

    @task(
        "slow",
        timeout="100ms",
        retry=RetryPolicy(max_attempts=2, initial_delay="0s", max_delay="0s"),
    )
    async def slow(payload: Any, ctx: Context) -> None:
        try:
            await asyncio.sleep(5)
        finally:
            reasons.append(ctx.signal.reason)

    rl = await make_runtime([slow])
    await rl.trigger(slow, None)
    first = await rl.execute_next()
    assert first is not None and first.status is RunStatus.RETRYING
    assert first.failure is not None and first.failure.code == ErrorCode.TASK_TIMEOUT.value
    assert reasons == [SignalReason.TIMEOUT]
    second = await rl.execute_next()
    assert second is not None and second.status is RunStatus.FAILED


async def test_run_now_executes_inline_and_never_picks_up_another_run(
    make_runtime: Factory,
) -> None:
    seen, record = _recorder()
    rl = await make_runtime([record])
    waiting = await rl.trigger(record, {"order_id": 1})
    done = await rl.run_now(record, {"order_id": 2})
    assert done.status is RunStatus.SUCCEEDED and done.source.type is RunSourceType.RUN_NOW
    assert seen == [Order(order_id=2)]
    assert (await rl.runs.get(waiting.id)).status is RunStatus.QUEUED
    assert await _event_types(rl, done.id) == ["run.created", "run.started", "run.succeeded"]


async def test_a_worker_never_exceeds_its_local_concurrency(make_runtime: Factory) -> None:
    active = 0
    peak = 0

    @task("busy")
    async def busy(payload: Any, ctx: Context) -> None:
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        await asyncio.sleep(0.02)
        active -= 1

    rl = await make_runtime([busy])
    await rl.trigger_many(busy, [None] * 40)
    worker = rl.worker(mode=WorkerMode.DRAIN, concurrency=4, handle_signals=False)
    await worker.run()
    assert peak == 4
    stats = next(s for s in await rl.queue_stats() if s.queue == "main")
    assert stats.counts == {RunStatus.SUCCEEDED: 40}


async def test_a_polling_worker_picks_up_new_work_and_stops_gracefully(
    make_runtime: Factory,
) -> None:
    seen, record = _recorder()
    rl = await make_runtime([record])
    worker = rl.worker(concurrency=2, poll_interval="50ms", handle_signals=False)
    running = asyncio.create_task(worker.run())
    run = await rl.trigger(record, {"order_id": 9})
    await wait_for_status(rl, run.id, RunStatus.SUCCEEDED)
    await worker.stop()
    await asyncio.wait_for(running, 5)
    assert seen == [Order(order_id=9)]


async def test_worker_shutdown_signals_in_flight_tasks_and_releases_what_gives_up(
    make_runtime: Factory,
) -> None:
    started = asyncio.Event()
    reasons: list[Any] = []

    @task("long")
    async def long_task(payload: Any, ctx: Context) -> None:
        started.set()
        reason = await ctx.signal.wait()
        reasons.append(reason)
        raise RuntimeError("interrupted")

    rl = await make_runtime([long_task])
    run = await rl.trigger(long_task, None)
    worker = rl.worker(concurrency=1, handle_signals=False)
    running = asyncio.create_task(worker.run())
    await asyncio.wait_for(started.wait(), 5)
    await worker.stop()
    await asyncio.wait_for(running, 5)
    assert reasons == [SignalReason.SHUTDOWN]
    stored = await rl.runs.get(run.id)
    assert stored.status is RunStatus.RELEASED and stored.failure_count == 0


async def test_heartbeats_keep_a_long_attempt_leased(make_runtime: Factory) -> None:
    @task("lengthy")
    async def lengthy(payload: Any, ctx: Context) -> str:
        await asyncio.sleep(1.2)
        return "done"

    rl = await make_runtime([lengthy])
    run = await rl.trigger(lengthy, None)
    worker = rl.worker(
        concurrency=1,
        lease_duration="500ms",
        heartbeat_interval="100ms",
        handle_signals=False,
        mode=WorkerMode.DRAIN,
    )
    running = asyncio.create_task(worker.run())
    await asyncio.sleep(0.8)
    report = await rl.tick()
    assert report.leases_recovered == 0
    await asyncio.wait_for(running, 5)
    assert (await rl.runs.get(run.id)).status is RunStatus.SUCCEEDED


async def _count_status(rl: Any, status: RunStatus) -> int:
    return len((await rl.runs.list(statuses=[status], limit=100)).data)


async def test_runs_claimed_ahead_are_released_unstarted_when_the_worker_stops(
    make_runtime: Factory,
) -> None:
    started: list[int] = []

    @task("quick")
    async def quick(payload: Any, ctx: Context) -> None:
        return None

    @task("blocking")
    async def blocking(payload: Any, ctx: Context) -> None:
        started.append(payload)
        await ctx.signal.wait()

    rl = await make_runtime([quick, blocking])
    # A quick attempt first: once the worker knows its tasks are short, it claims ahead.
    warm = await rl.trigger(quick, None)
    worker = rl.worker(concurrency=1, claim_ahead=4, handle_signals=False)
    running = asyncio.create_task(worker.run())
    await wait_for_status(rl, warm.id, RunStatus.SUCCEEDED)
    runs = await rl.trigger_many(blocking, list(range(5)))
    # One run in the slot, the other four claimed and waiting for it.
    for _ in range(250):
        if await _count_status(rl, RunStatus.RUNNING) == 5:
            break
        await asyncio.sleep(0.02)
    assert await _count_status(rl, RunStatus.RUNNING) == 5
    assert len(started) == 1
    await worker.stop()
    await asyncio.wait_for(running, 5)
    assert len(started) == 1
    unstarted = [run for run in runs if run.payload not in started]
    assert len(unstarted) == 4
    for run in unstarted:
        stored = await rl.runs.get(run.id)
        assert stored.status is RunStatus.RELEASED and stored.failure_count == 0
        assert stored.lease is None
    assert await _event_types(rl, unstarted[0].id) == [
        "run.created",
        "run.started",
        "run.released",
    ]


async def test_runs_waiting_in_the_claim_ahead_buffer_keep_their_leases(
    make_runtime: Factory,
) -> None:
    @task("quick")
    async def quick(payload: Any, ctx: Context) -> None:
        return None

    @task("slow")
    async def slow(payload: Any, ctx: Context) -> int:
        await asyncio.sleep(0.5)
        return ctx.attempt

    rl = await make_runtime([quick, slow])
    warm = await rl.trigger(quick, None)
    worker = rl.worker(
        concurrency=1,
        claim_ahead=2,
        lease_duration="400ms",
        heartbeat_interval="100ms",
        poll_interval="20ms",
        handle_signals=False,
    )
    running = asyncio.create_task(worker.run())
    await wait_for_status(rl, warm.id, RunStatus.SUCCEEDED)
    runs = await rl.trigger_many(slow, [None] * 3)
    # The last run waits a second under its lease, more than twice the lease.
    await asyncio.sleep(0.75)
    assert (await rl.tick()).leases_recovered == 0
    for run in runs:
        done = await wait_for_status(rl, run.id, RunStatus.SUCCEEDED, within=5)
        assert done.result == 1 and done.attempt == 1
    await worker.stop()
    await asyncio.wait_for(running, 5)


__all__ = [name for name in dir() if name.startswith("test_")]
pytestmark = pytest.mark.asyncio
