"""The storage conformance suite: every storage driver must pass all of it.

Use it from a test module of your own::

    from runlane.testing.conformance.storage import *  # noqa: F403

and provide two fixtures: ``lane_factory`` (a callable returning a new
:class:`runlane.Lane` on the same store each time it is called) and
``environment`` (a fresh environment name per test). The tests are async and
expect pytest-asyncio in ``auto`` mode.
"""

from __future__ import annotations

import asyncio
import logging
import random
import threading
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta
from math import nan
from typing import Any

import pytest
from pydantic import BaseModel

from runlane import (
    Context,
    ErrorCode,
    Lane,
    ManualClock,
    RetryPolicy,
    Runlane,
    RunlaneError,
    RunStatus,
    SignalReason,
    TaskDef,
    WorkerMode,
    queue,
    schedule,
    task,
)
from runlane.core.delivery import DeliveryOutcome, IgnoredReason
from runlane.storage.protocol import LeaseRequest, QueuePolicy, SettlesAndClaims
from runlane.testing import drain, wait_for_status
from runlane.transport.memory import MemoryTransport
from runlane.transport.protocol import DeliveryMessage
from runlane.types.runs import Run, RunEventType, RunSourceType

__all__ = [name for name in dir() if name.startswith("test_")]

MAIN = queue("main", default=True)
OTHER = queue("other")


class Order(BaseModel):
    """Payload schema used across the suite."""

    order_id: int
    note: str = ""


Factory = Callable[..., Awaitable[Runlane]]


@pytest.fixture
async def make_runtime(
    lane_factory: Callable[[], Lane], environment: str
) -> AsyncIterator[Factory]:
    """Build opened runtimes on the store under test; all are closed afterwards."""
    opened: list[Runlane] = []

    async def build(
        tasks: Sequence[TaskDef[Any]],
        *,
        queues: Sequence[Any] = (MAIN, OTHER),
        clock: ManualClock | None = None,
        env: str | None = None,
        **options: Any,
    ) -> Runlane:
        rl = Runlane(
            lane=lane_factory(),
            queues=list(queues),
            tasks=list(tasks),
            environment=env or environment,
            clock=clock,
            **options,
        )
        await rl.migrate()
        await rl.open()
        opened.append(rl)
        return rl

    yield build
    for rl in opened:
        await rl.close()


def _recorder() -> tuple[list[Any], TaskDef[Any]]:
    seen: list[Any] = []

    @task("orders.record", schema=Order)
    async def record(payload: Order, ctx: Context) -> dict[str, Any]:
        seen.append(payload)
        return {"order_id": payload.order_id, "attempt": ctx.attempt}

    return seen, record


async def _event_types(rl: Runlane, run_id: str) -> list[str]:
    return [event.type.value for event in await rl.runs.events(run_id)]


async def _all_runs(rl: Runlane) -> list[Run]:
    return (await rl.runs.list(limit=1000)).data


# -- producing -----------------------------------------------------------------------


async def test_trigger_commits_a_queued_run_with_its_created_event(make_runtime: Factory) -> None:
    _, record = _recorder()
    rl = await make_runtime([record])
    run = await rl.trigger(record, {"order_id": 7}, trace_carrier={"traceparent": "00-abc-def-01"})
    stored = await rl.runs.get(run.id)
    assert stored.status is RunStatus.QUEUED
    assert stored.payload == {"order_id": 7, "note": ""}
    assert stored.queue == "main" and stored.task_id == "orders.record"
    assert stored.attempt == 0 and stored.source.type is RunSourceType.TRIGGER
    assert stored.trace_carrier == {"traceparent": "00-abc-def-01"}
    assert await _event_types(rl, run.id) == ["run.created"]


async def test_trigger_accepts_a_schema_instance_and_the_handler_gets_one(
    make_runtime: Factory,
) -> None:
    seen, record = _recorder()
    rl = await make_runtime([record])
    await rl.trigger(record, Order(order_id=3, note="x"))
    (done,) = await drain(rl)
    assert done.status is RunStatus.SUCCEEDED
    assert seen == [Order(order_id=3, note="x")]
    assert done.result == {"order_id": 3, "attempt": 1}


async def test_delay_and_run_at_make_a_scheduled_run_that_waits(make_runtime: Factory) -> None:
    clock = ManualClock()
    _, record = _recorder()
    rl = await make_runtime([record], clock=clock)
    delayed = await rl.trigger(record, {"order_id": 1}, delay="10s")
    later = await rl.trigger(record, {"order_id": 2}, run_at=clock.now() + timedelta(minutes=1))
    assert delayed.status is RunStatus.SCHEDULED and later.status is RunStatus.SCHEDULED
    assert await rl.execute_next() is None
    clock.advance("10s")
    first = await rl.execute_next()
    assert first is not None and first.id == delayed.id
    assert await rl.execute_next() is None
    clock.advance("1m")
    second = await rl.execute_next()
    assert second is not None and second.id == later.id


async def test_queue_override_routes_the_run_and_workers_filter_by_queue(
    make_runtime: Factory,
) -> None:
    _, record = _recorder()
    rl = await make_runtime([record])
    run = await rl.trigger(record, {"order_id": 1}, queue=OTHER)
    assert run.queue == "other"
    assert await rl.execute_next(queues=[MAIN]) is None
    done = await rl.execute_next(queues=[OTHER])
    assert done is not None and done.id == run.id


async def test_trigger_many_creates_every_run_in_order(make_runtime: Factory) -> None:
    _, record = _recorder()
    rl = await make_runtime([record])
    runs = await rl.trigger_many(record, [{"order_id": i} for i in range(2500)])
    assert len(runs) == 2500 and len({r.id for r in runs}) == 2500
    assert [r.payload["order_id"] for r in runs] == list(range(2500))
    assert all(r.status is RunStatus.QUEUED for r in runs)
    stats = await rl.queue_stats()
    main_stats = next(s for s in stats if s.queue == "main")
    assert main_stats.counts[RunStatus.QUEUED] == 2500


async def test_runs_created_in_bulk_read_back_as_returned_with_their_created_event(
    make_runtime: Factory,
) -> None:
    _, record = _recorder()
    rl = await make_runtime([record])
    due = datetime.now(UTC) + timedelta(hours=1)
    carrier = {"traceparent": "00-abc-def-01"}
    runs = await rl.trigger_many(
        record,
        [{"order_id": i, "note": "ü"} for i in range(300)],
        run_at=due,
        concurrency_key="tenant-1",
        trace_carrier=carrier,
    )
    for run in (runs[0], runs[137], runs[-1]):
        assert await rl.runs.get(run.id) == run
        (created,) = await rl.runs.events(run.id)
        assert created.type.value == "run.created" and created.sequence == 1
        assert created.occurred_at == run.created_at
        assert created.data == {
            "task_id": "orders.record",
            "queue": "main",
            "run_at": run.run_at.isoformat(),
            "source": {"type": "trigger"},
        }
    assert runs[0].status is RunStatus.SCHEDULED and runs[0].trace_carrier == carrier


async def test_concurrent_triggers_each_create_their_own_run(make_runtime: Factory) -> None:
    _, record = _recorder()
    rl = await make_runtime([record])
    # Enough at once for one shared write to take the bulk path, across queues and due times.
    runs = await asyncio.gather(
        *(
            rl.trigger(
                record,
                {"order_id": i},
                queue=OTHER if i % 3 == 0 else None,
                delay="1h" if i % 7 == 0 else None,
            )
            for i in range(150)
        )
    )
    assert [r.payload["order_id"] for r in runs] == list(range(150))
    assert len({r.id for r in runs}) == 150
    for run in runs[::7]:
        assert await rl.runs.get(run.id) == run
        assert await _event_types(rl, run.id) == ["run.created"]
    assert runs[0].queue == "other" and runs[0].status is RunStatus.SCHEDULED
    assert runs[1].queue == "main" and runs[1].status is RunStatus.QUEUED
    good = rl.trigger(record, {"order_id": 99})
    results = await asyncio.gather(
        rl.trigger(record, {"order_id": "x"}), good, return_exceptions=True
    )
    assert isinstance(results[0], RunlaneError) and results[0].code is ErrorCode.PAYLOAD_INVALID
    assert isinstance(results[1], Run) and (await rl.runs.get(results[1].id)) == results[1]
    assert len(await _all_runs(rl)) == 151


# -- bad input changes nothing -------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "code"),
    [
        (lambda rl, t: rl.trigger(t, {"order_id": "seven"}), ErrorCode.PAYLOAD_INVALID),
        (lambda rl, t: rl.trigger(t, {"note": "no id"}), ErrorCode.PAYLOAD_INVALID),
        (
            lambda rl, t: rl.trigger(t, {"order_id": 1, "note": "x" * 300_000}),
            ErrorCode.PAYLOAD_TOO_LARGE,
        ),
        (lambda rl, t: rl.trigger("no.such.task", {}), ErrorCode.TASK_NOT_FOUND),
        (
            lambda rl, t: rl.trigger(t, {"order_id": 1}, queue=queue("nowhere")),
            ErrorCode.QUEUE_NOT_FOUND,
        ),
        (
            lambda rl, t: rl.trigger(t, {"order_id": 1}, queue=queue("main", concurrency_limit=2)),
            ErrorCode.QUEUE_POLICY_DRIFT,
        ),
        (
            lambda rl, t: rl.trigger(t, {"order_id": 1}, delay="soon"),
            ErrorCode.CONFIGURATION_INVALID,
        ),
        (lambda rl, t: rl.trigger(t, {"order_id": 1}, delay=-5), ErrorCode.CONFIGURATION_INVALID),
        (
            lambda rl, t: rl.trigger(t, {"order_id": 1}, idempotency_key="a:b"),
            ErrorCode.CONFIGURATION_INVALID,
        ),
        (
            lambda rl, t: rl.trigger(t, {"order_id": 1}, singleton_key=""),
            ErrorCode.CONFIGURATION_INVALID,
        ),
        (
            lambda rl, t: rl.trigger_many(t, [{"order_id": 1}, {"order_id": "bad"}]),
            ErrorCode.PAYLOAD_INVALID,
        ),
        (lambda rl, t: rl.runs.get("missing-run"), ErrorCode.RUN_NOT_FOUND),
        (lambda rl, t: rl.runs.cancel("missing-run"), ErrorCode.RUN_NOT_FOUND),
        (lambda rl, t: rl.execute_next(queues=[queue("nowhere")]), ErrorCode.QUEUE_NOT_FOUND),
        (
            lambda rl, t: rl.runs.prune(older_than="1d", statuses=["queued"]),
            ErrorCode.CONFIGURATION_INVALID,
        ),
        # NUL characters: PostgreSQL cannot store them, so no lane accepts them.
        (
            lambda rl, t: rl.trigger(t, {"order_id": 1, "note": "a\x00b"}),
            ErrorCode.PAYLOAD_INVALID,
        ),
        (
            lambda rl, t: rl.trigger_many(t, [{"order_id": 1}, {"order_id": 2, "note": "\x00"}]),
            ErrorCode.PAYLOAD_INVALID,
        ),
        (
            lambda rl, t: rl.trigger(t, {"order_id": 1, "note": "\ud800"}),
            ErrorCode.PAYLOAD_INVALID,
        ),
        (
            lambda rl, t: rl.trigger(t, {"order_id": 1}, idempotency_key="k\x00"),
            ErrorCode.CONFIGURATION_INVALID,
        ),
        (
            lambda rl, t: rl.trigger(t, {"order_id": 1}, trace_carrier={"traceparent": "\x00"}),
            ErrorCode.CONFIGURATION_INVALID,
        ),
    ],
)
async def test_bad_input_raises_a_typed_error_and_writes_nothing(
    make_runtime: Factory, call: Callable[[Runlane, TaskDef[Any]], Any], code: ErrorCode
) -> None:
    _, record = _recorder()
    rl = await make_runtime([record])
    existing = await rl.trigger(record, {"order_id": 0})
    with pytest.raises(RunlaneError) as caught:
        await call(rl, record)
    assert caught.value.code is code
    assert caught.value.message
    runs = await _all_runs(rl)
    assert [r.id for r in runs] == [existing.id]
    assert runs[0].status is RunStatus.QUEUED
    assert await _event_types(rl, existing.id) == ["run.created"]


async def test_a_task_without_queue_and_no_default_queue_is_a_configuration_error(
    make_runtime: Factory,
) -> None:
    _, record = _recorder()
    rl = await make_runtime([record], queues=[OTHER])
    with pytest.raises(RunlaneError) as caught:
        await rl.trigger(record, {"order_id": 1})
    assert caught.value.code is ErrorCode.CONFIGURATION_INVALID
    assert await _all_runs(rl) == []


# -- executing -------------------------------------------------------------------------


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


# -- leases, fencing and recovery --------------------------------------------------------


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
    from runlane.core.transitions import Succeeded, settle_attempt

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


# -- cancellation ------------------------------------------------------------------------


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


# -- idempotency and singletons ---------------------------------------------------------------


async def test_an_idempotency_key_returns_the_owning_run(make_runtime: Factory) -> None:
    clock = ManualClock()
    _, record = _recorder()
    rl = await make_runtime([record], clock=clock)
    first = await rl.trigger(record, {"order_id": 1}, idempotency_key="order-1")
    again = await rl.trigger(record, {"order_id": 1}, idempotency_key="order-1")
    assert again.id == first.id
    await drain(rl)
    clock.advance("29d")
    retained = await rl.trigger(record, {"order_id": 1}, idempotency_key="order-1")
    assert retained.id == first.id and retained.status is RunStatus.SUCCEEDED
    clock.advance("2d")
    fresh = await rl.trigger(record, {"order_id": 1}, idempotency_key="order-1")
    assert fresh.id != first.id and fresh.status is RunStatus.QUEUED
    assert len(await _all_runs(rl)) == 2


async def test_idempotency_keys_can_come_from_the_payload_and_be_reset(
    make_runtime: Factory,
) -> None:
    @task("keyed", schema=Order, idempotency_key=lambda p: f"order-{p.order_id}")
    async def keyed(payload: Order, ctx: Context) -> None:
        return None

    rl = await make_runtime([keyed])
    first = await rl.trigger(keyed, {"order_id": 4})
    assert first.idempotency_key == "order-4"
    assert (await rl.trigger(keyed, {"order_id": 4})).id == first.id
    assert (await rl.trigger(keyed, {"order_id": 5})).id != first.id
    assert await rl.idempotency_keys.reset(keyed, "order-4") is True
    assert await rl.idempotency_keys.reset(keyed, "order-4") is False
    assert (await rl.trigger(keyed, {"order_id": 4})).id != first.id


async def test_a_failed_owner_releases_its_idempotency_key_at_once(make_runtime: Factory) -> None:
    @task("breaks", retry=RetryPolicy(max_attempts=1))
    async def breaks(payload: Any, ctx: Context) -> None:
        raise RuntimeError("no")

    rl = await make_runtime([breaks])
    first = await rl.trigger(breaks, None, idempotency_key="k")
    (failed,) = await drain(rl)
    assert failed.status is RunStatus.FAILED
    second = await rl.trigger(breaks, None, idempotency_key="k")
    assert second.id != first.id


async def test_active_only_idempotency_releases_when_the_owner_finishes(
    make_runtime: Factory,
) -> None:
    @task("active.keyed", idempotency_key="only-one", idempotency_key_ttl="active")
    async def active_keyed(payload: Any, ctx: Context) -> None:
        return None

    rl = await make_runtime([active_keyed])
    first = await rl.trigger(active_keyed, None)
    assert (await rl.trigger(active_keyed, None)).id == first.id
    await drain(rl)
    assert (await rl.tick()).idempotency_keys_released == 1
    assert (await rl.trigger(active_keyed, None)).id != first.id


async def test_a_singleton_key_allows_one_active_run(make_runtime: Factory) -> None:
    _, record = _recorder()
    rl = await make_runtime([record])
    first = await rl.trigger(record, {"order_id": 1}, singleton_key="sync-account-9")
    second = await rl.trigger(record, {"order_id": 2}, singleton_key="sync-account-9")
    other = await rl.trigger(record, {"order_id": 3}, singleton_key="sync-account-10")
    assert second.id == first.id and other.id != first.id
    await drain(rl)
    after = await rl.trigger(record, {"order_id": 4}, singleton_key="sync-account-9")
    assert after.id != first.id and after.status is RunStatus.QUEUED


async def test_concurrent_triggers_with_one_key_create_one_run(make_runtime: Factory) -> None:
    _, record = _recorder()
    runtimes = [await make_runtime([record]) for _ in range(4)]
    idem = await asyncio.gather(
        *(rl.trigger(record, {"order_id": 1}, idempotency_key="same") for rl in runtimes * 3)
    )
    single = await asyncio.gather(
        *(rl.trigger(record, {"order_id": 1}, singleton_key="same") for rl in runtimes * 3)
    )
    assert len({r.id for r in idem}) == 1
    assert len({r.id for r in single}) == 1


# -- operating ---------------------------------------------------------------------------


async def test_environments_on_one_store_never_see_each_other(make_runtime: Factory) -> None:
    _, record = _recorder()
    blue = await make_runtime([record], env="blue-" + str(id(record)))
    green = await make_runtime([record], env="green-" + str(id(record)))
    run = await blue.trigger(record, {"order_id": 1})
    with pytest.raises(RunlaneError) as caught:
        await green.runs.get(run.id)
    assert caught.value.code is ErrorCode.RUN_NOT_FOUND
    assert await green.execute_next() is None
    assert (await green.runs.list()).data == []
    assert (await blue.execute_next()) is not None


async def test_runs_list_pages_newest_first_with_filters(make_runtime: Factory) -> None:
    _, record = _recorder()

    @task("other.task")
    async def other_task(payload: Any, ctx: Context) -> None:
        return None

    rl = await make_runtime([record, other_task])
    created = [await rl.trigger(record, {"order_id": i}) for i in range(5)]
    other = await rl.trigger(other_task, None, queue=OTHER)
    page = await rl.runs.list(limit=2)
    assert [r.id for r in page.data] == [other.id, created[4].id]
    assert page.next_cursor is not None
    rest = await rl.runs.list(limit=10, cursor=page.next_cursor)
    assert [r.id for r in rest.data] == [r.id for r in reversed(created[:4])]
    assert rest.next_cursor is None
    by_task = await rl.runs.list(tasks=[other_task])
    assert [r.id for r in by_task.data] == [other.id]
    by_queue = await rl.runs.list(queues=[MAIN])
    assert len(by_queue.data) == 5
    await rl.execute_next(queues=[OTHER])
    by_status = await rl.runs.list(statuses=[RunStatus.SUCCEEDED])
    assert [r.id for r in by_status.data] == [other.id]


async def test_retry_and_rerun_create_linked_child_runs(make_runtime: Factory) -> None:
    @task("flaky", retry=RetryPolicy(max_attempts=1))
    async def flaky(payload: Any, ctx: Context) -> str:
        if payload == "fail":
            raise RuntimeError("nope")
        return "ok"

    rl = await make_runtime([flaky])
    bad = await rl.trigger(flaky, "fail")
    good = await rl.trigger(flaky, "fine")
    await drain(rl)
    child = await rl.runs.retry(bad.id)
    assert child.source.type is RunSourceType.MANUAL_RETRY and child.source.run_id == bad.id
    assert child.status is RunStatus.QUEUED and child.payload == "fail"
    with pytest.raises(RunlaneError) as caught:
        await rl.runs.retry(good.id)
    assert caught.value.code is ErrorCode.INVALID_STATE
    rerun = await rl.runs.rerun(good.id)
    assert rerun.source.type is RunSourceType.RERUN and rerun.source.run_id == good.id
    with pytest.raises(RunlaneError) as active:
        await rl.runs.rerun(rerun.id)
    assert active.value.code is ErrorCode.INVALID_STATE


async def test_prune_deletes_old_finished_runs_with_their_history(make_runtime: Factory) -> None:
    clock = ManualClock()
    _, record = _recorder()
    rl = await make_runtime([record], clock=clock)
    old = await rl.trigger(record, {"order_id": 1})
    await drain(rl)
    clock.advance("2d")
    recent = await rl.trigger(record, {"order_id": 2})
    await drain(rl)
    waiting = await rl.trigger(record, {"order_id": 3})
    assert await rl.runs.prune(older_than="1d") == 1
    remaining = {r.id for r in await _all_runs(rl)}
    assert remaining == {recent.id, waiting.id}
    with pytest.raises(RunlaneError):
        await rl.runs.get(old.id)
    assert await rl.storage.list_run_events(rl.environment, old.id) == []


async def test_tick_prunes_past_the_retention_setting(make_runtime: Factory) -> None:
    clock = ManualClock()
    _, record = _recorder()
    rl = await make_runtime([record], clock=clock, retention="7d")
    await rl.trigger(record, {"order_id": 1})
    await drain(rl)
    assert (await rl.tick()).runs_pruned == 0
    clock.advance("8d")
    assert (await rl.tick()).runs_pruned == 1
    assert await _all_runs(rl) == []


async def test_queue_stats_count_runs_per_queue_and_status(make_runtime: Factory) -> None:
    _, record = _recorder()
    rl = await make_runtime([record])
    await rl.trigger_many(record, [{"order_id": i} for i in range(3)])
    await rl.trigger(record, {"order_id": 9}, queue=OTHER, delay="1h")
    await rl.execute_next()
    stats = {s.queue: s for s in await rl.queue_stats()}
    assert stats["main"].counts == {RunStatus.SUCCEEDED: 1, RunStatus.QUEUED: 2}
    assert stats["main"].waiting == 2 and stats["main"].running == 0
    assert stats["other"].counts == {RunStatus.SCHEDULED: 1}


async def test_queue_stats_count_due_runs_and_the_oldest_due_time(make_runtime: Factory) -> None:
    clock = ManualClock()
    _, record = _recorder()
    rl = await make_runtime([record], clock=clock)
    first = await rl.trigger(record, {"order_id": 1})
    clock.advance("10s")
    await rl.trigger(record, {"order_id": 2})
    await rl.trigger(record, {"order_id": 3}, delay="1h")
    await rl.trigger(record, {"order_id": 4}, queue=OTHER, delay="1m")
    stats = {s.queue: s for s in await rl.queue_stats()}
    assert (stats["main"].due, stats["main"].waiting) == (2, 3)
    assert stats["main"].oldest_due_at == first.run_at
    assert (stats["other"].due, stats["other"].oldest_due_at) == (0, None)
    clock.advance("2m")
    await rl.execute_next(queues=["main"])
    stats = {s.queue: s for s in await rl.queue_stats()}
    assert stats["main"].due == 1 and stats["main"].oldest_due_at != first.run_at
    assert stats["other"].due == 1 and stats["other"].oldest_due_at == clock.now() - timedelta(
        minutes=1
    )


async def test_queue_stats_count_due_runs_per_key_of_a_bounded_queue(
    make_runtime: Factory,
) -> None:
    serial = queue("serial", concurrency_limit=1)
    _, record = _recorder()
    rl = await make_runtime([record], queues=[serial])
    for key in ("a", "a", "b"):
        await rl.trigger(record, {"order_id": 1}, queue=serial, concurrency_key=key)
    stats = {s.concurrency_key: s for s in await rl.queue_stats()}
    assert (stats["a"].due, stats["b"].due) == (2, 1)


async def test_throughput_counts_runs_finished_inside_the_window_per_queue(
    make_runtime: Factory,
) -> None:
    clock = ManualClock()

    @task("outcomes.mixed", retry=RetryPolicy(max_attempts=1))
    async def mixed(payload: Any, ctx: Context) -> str:
        if payload == "fail":
            raise RuntimeError("no")
        return "ok"

    rl = await make_runtime([mixed], clock=clock)
    await rl.trigger(mixed, "ok")
    await drain(rl)
    clock.advance("2h")
    for payload in ("ok", "ok", "fail"):
        await rl.trigger(mixed, payload)
    await drain(rl)
    cancelled = await rl.trigger(mixed, "ok", queue=OTHER)
    await rl.runs.cancel(cancelled.id)
    await rl.trigger(mixed, "ok", queue=OTHER, delay="1h")

    recent = {t.queue: t for t in await rl.throughput("1h")}
    everything = {t.queue: t for t in await rl.throughput(clock.now() - timedelta(hours=3))}

    assert (recent["main"].succeeded, recent["main"].failed, recent["main"].cancelled) == (2, 1, 0)
    assert (recent["other"].succeeded, recent["other"].cancelled) == (0, 1)
    assert everything["main"].succeeded == 3
    with pytest.raises(RunlaneError) as raised:
        await rl.throughput(datetime(2026, 1, 1))
    assert raised.value.code is ErrorCode.CONFIGURATION_INVALID


async def test_outbox_backlog_is_zero_per_queue_without_a_transport(make_runtime: Factory) -> None:
    _, record = _recorder()
    rl = await make_runtime([record])
    await rl.trigger(record, {"order_id": 1})
    assert await rl.outbox_backlog() == {"main": 0, "other": 0}


async def test_the_sync_facade_blocks_for_results(
    make_runtime: Factory, lane_factory: Any, environment: str
) -> None:
    _, record = _recorder()
    rl = Runlane(lane=lane_factory(), queues=[MAIN, OTHER], tasks=[record], environment=environment)
    await asyncio.to_thread(rl.sync.migrate)

    def use() -> tuple[Run, Run]:
        run = rl.sync.trigger(record, {"order_id": 1})
        done = rl.sync.execute_next()
        assert done is not None
        return run, rl.sync.runs.get(run.id)

    try:
        run, stored = await asyncio.to_thread(use)
        assert stored.id == run.id and stored.status is RunStatus.SUCCEEDED
    finally:
        await asyncio.to_thread(rl.sync.close)


# -- schedules ---------------------------------------------------------------------------


def _every_minute_task(catch_up: bool = False) -> tuple[list[Any], TaskDef[Any]]:
    slots: list[Any] = []

    @task(
        "reports.minutely",
        schema=Order,
        schedules=[
            schedule("reports.every-minute", every="1m", payload={"order_id": 1}, catch_up=catch_up)
        ],
    )
    async def minutely(payload: Order, ctx: Context) -> None:
        slots.append(ctx.scheduled_for)

    return slots, minutely


async def test_tick_materialises_each_due_slot_exactly_once(make_runtime: Factory) -> None:
    clock = ManualClock(datetime(2030, 1, 1, 12, 0, 30, tzinfo=UTC))
    slots, minutely = _every_minute_task()
    rl = await make_runtime([minutely], clock=clock)
    await rl.tick()  # first seen at 12:00:30
    clock.advance("1m")
    assert (await rl.tick()).schedules_materialized == 1
    assert (await rl.tick()).schedules_materialized == 0
    (run,) = await _all_runs(rl)
    assert run.source.type is RunSourceType.SCHEDULE
    assert run.source.schedule_id == "reports.every-minute"
    assert run.source.occurs_at == datetime(2030, 1, 1, 12, 1, tzinfo=UTC)
    assert run.idempotency_key is not None and run.payload == {"order_id": 1, "note": ""}
    await drain(rl)
    assert slots == [datetime(2030, 1, 1, 12, 1, tzinfo=UTC)]
    clock.advance("1m")
    assert (await rl.tick()).schedules_materialized == 1
    assert len(await _all_runs(rl)) == 2


async def test_a_schedule_fires_no_slot_from_before_it_was_first_seen(
    make_runtime: Factory,
) -> None:
    clock = ManualClock(datetime(2030, 1, 1, 12, 0, 30, tzinfo=UTC))
    _, minutely = _every_minute_task(catch_up=True)
    rl = await make_runtime([minutely], clock=clock)
    assert (await rl.tick()).schedules_materialized == 0
    assert (await rl.tick()).schedules_materialized == 0
    (info,) = await rl.schedules.list()
    assert info.last_fired_at is None
    assert info.next_fire_at == datetime(2030, 1, 1, 12, 1, tzinfo=UTC)
    clock.advance("1m")
    assert (await rl.tick()).schedules_materialized == 1
    (run,) = await _all_runs(rl)
    assert run.source.occurs_at == datetime(2030, 1, 1, 12, 1, tzinfo=UTC)


async def test_a_schedule_added_later_starts_after_it_is_first_seen_not_with_the_others(
    make_runtime: Factory,
) -> None:
    clock = ManualClock(datetime(2030, 1, 1, 12, 0, 30, tzinfo=UTC))
    _, minutely = _every_minute_task(catch_up=True)
    first = await make_runtime([minutely], clock=clock)
    await first.tick()
    clock.advance("10m")

    @task("reports.often", schedules=[schedule("reports.five-minutely", every="5m", catch_up=True)])
    async def often(payload: Any, ctx: Context) -> None:
        return None

    # A deploy adds a schedule: the old one catches up, the new one starts from now.
    deployed = await make_runtime([minutely, often], clock=clock)
    assert (await deployed.tick()).schedules_materialized == 10
    clock.advance("5m")
    assert (await deployed.tick()).schedules_materialized == 6
    new_slots = [
        r.source.occurs_at
        for r in await _all_runs(deployed)
        if r.source.schedule_id == "reports.five-minutely"
    ]
    assert new_slots == [datetime(2030, 1, 1, 12, 15, tzinfo=UTC)]


async def test_concurrent_first_ticks_keep_the_earliest_first_seen_point(
    make_runtime: Factory,
) -> None:
    clock = ManualClock(datetime(2030, 1, 1, 12, 0, 30, tzinfo=UTC))
    _, minutely = _every_minute_task(catch_up=True)
    runtimes = [await make_runtime([minutely], clock=clock) for _ in range(3)]
    reports = await asyncio.gather(*(rl.tick() for rl in runtimes))
    assert sum(r.schedules_materialized for r in reports) == 0
    later = await make_runtime([minutely], clock=clock)
    await later.storage.mark_schedules_seen(
        later.environment, ["reports.every-minute"], clock.now() + timedelta(hours=1)
    )
    clock.advance("3m")
    assert (await later.tick()).schedules_materialized == 3


async def test_concurrent_ticks_create_one_run_per_slot(make_runtime: Factory) -> None:
    clock = ManualClock(datetime(2030, 1, 1, 12, 0, 30, tzinfo=UTC))
    _, minutely = _every_minute_task()
    runtimes = [await make_runtime([minutely], clock=clock) for _ in range(4)]
    await asyncio.gather(*(rl.tick() for rl in runtimes))  # first seen
    clock.advance("1m")
    for _ in range(5):
        reports = await asyncio.gather(*(rl.tick() for rl in runtimes))
        assert sum(r.schedules_materialized for r in reports) == 1
        clock.advance("1m")
    runs = await _all_runs(runtimes[0])
    assert len(runs) == 5
    assert len({r.source.occurs_at for r in runs}) == 5


async def test_after_downtime_only_the_latest_missed_slot_fires(make_runtime: Factory) -> None:
    clock = ManualClock(datetime(2030, 1, 1, 12, 0, 30, tzinfo=UTC))
    _, minutely = _every_minute_task()
    rl = await make_runtime([minutely], clock=clock)
    await rl.tick()
    clock.advance("10m")
    assert (await rl.tick()).schedules_materialized == 1
    newest = max(r.source.occurs_at for r in await _all_runs(rl) if r.source.occurs_at)
    assert newest == datetime(2030, 1, 1, 12, 10, tzinfo=UTC)


async def test_catch_up_fires_every_missed_slot(make_runtime: Factory) -> None:
    clock = ManualClock(datetime(2030, 1, 1, 12, 0, 30, tzinfo=UTC))
    _, minutely = _every_minute_task(catch_up=True)
    rl = await make_runtime([minutely], clock=clock)
    await rl.tick()
    clock.advance("10m")
    assert (await rl.tick()).schedules_materialized == 10
    assert len(await _all_runs(rl)) == 10


async def test_paused_schedules_stay_paused_across_restarts(make_runtime: Factory) -> None:
    clock = ManualClock(datetime(2030, 1, 1, 12, 0, 30, tzinfo=UTC))
    _, minutely = _every_minute_task()
    rl = await make_runtime([minutely], clock=clock)
    (info,) = await rl.schedules.list()
    assert info.id == "reports.every-minute" and info.task_id == "reports.minutely"
    assert info.next_fire_at == datetime(2030, 1, 1, 12, 1, tzinfo=UTC) and not info.paused
    paused = await rl.schedules.pause("reports.every-minute")
    assert paused.paused and paused.next_fire_at is None
    restarted = await make_runtime([minutely], clock=clock)
    assert (await restarted.tick()).schedules_materialized == 0
    assert (await restarted.schedules.list())[0].paused
    await restarted.schedules.resume("reports.every-minute")
    assert (await restarted.tick()).schedules_materialized == 0  # first seen now
    clock.advance("1m")
    assert (await restarted.tick()).schedules_materialized == 1
    with pytest.raises(RunlaneError) as caught:
        await rl.schedules.pause("no-such-schedule")
    assert caught.value.code is ErrorCode.SCHEDULE_NOT_FOUND


async def test_cron_schedules_fire_in_their_time_zone(make_runtime: Factory) -> None:
    clock = ManualClock(datetime(2030, 3, 1, 1, 30, tzinfo=UTC))

    @task(
        "invoices.nightly",
        schedules=[schedule("nightly", cron="0 3 * * *", timezone="Europe/Berlin")],
    )
    async def nightly(payload: Any, ctx: Context) -> None:
        return None

    rl = await make_runtime([nightly], clock=clock)
    (info,) = await rl.schedules.list()
    assert info.next_fire_at == datetime(2030, 3, 1, 2, 0, tzinfo=UTC)
    await rl.tick()
    clock.set(datetime(2030, 3, 1, 2, 0, 1, tzinfo=UTC))
    assert (await rl.tick()).schedules_materialized == 1
    latest = max(r.source.occurs_at for r in await _all_runs(rl) if r.source.occurs_at)
    assert latest == datetime(2030, 3, 1, 2, 0, tzinfo=UTC)


# -- maintenance leadership ------------------------------------------------------------

LEAD_TTL = 15.0


async def _contend(rl: Runlane, holder: str, clock: ManualClock) -> bool:
    return await rl.storage.hold_maintenance_lead(rl.environment, holder, clock.now(), LEAD_TTL)


async def test_of_two_contenders_for_the_maintenance_lead_one_wins_and_keeps_it(
    make_runtime: Factory,
) -> None:
    clock = ManualClock(datetime(2030, 1, 1, tzinfo=UTC))
    _, record = _recorder()
    first, second = [await make_runtime([record], clock=clock) for _ in range(2)]
    won = await asyncio.gather(_contend(first, "a", clock), _contend(second, "b", clock))
    assert sorted(won) == [False, True]
    (leader, holder), (other, loser) = (
        ((first, "a"), (second, "b")) if won[0] else ((second, "b"), (first, "a"))
    )
    for _ in range(3):
        clock.advance(LEAD_TTL / 2)
        assert await _contend(leader, holder, clock)
        assert not await _contend(other, loser, clock)


async def test_one_store_session_gives_the_lead_to_one_holder_only(make_runtime: Factory) -> None:
    clock = ManualClock(datetime(2030, 1, 1, tzinfo=UTC))
    _, record = _recorder()
    rl = await make_runtime([record], clock=clock)
    assert await _contend(rl, "a", clock)
    assert not await _contend(rl, "b", clock)
    assert await _contend(rl, "a", clock)


async def test_releasing_the_maintenance_lead_hands_it_over_at_once(make_runtime: Factory) -> None:
    clock = ManualClock(datetime(2030, 1, 1, tzinfo=UTC))
    _, record = _recorder()
    first, second = [await make_runtime([record], clock=clock) for _ in range(2)]
    assert await _contend(first, "a", clock)
    await second.storage.release_maintenance_lead(second.environment, "b")  # not its lead
    assert not await _contend(second, "b", clock)
    await first.storage.release_maintenance_lead(first.environment, "a")
    assert await _contend(second, "b", clock)
    assert not await _contend(first, "a", clock)


async def test_a_leader_gone_without_releasing_is_replaced_once_its_lead_lapses(
    make_runtime: Factory,
) -> None:
    clock = ManualClock(datetime(2030, 1, 1, tzinfo=UTC))
    _, record = _recorder()
    first, second = [await make_runtime([record], clock=clock) for _ in range(2)]
    assert await _contend(first, "a", clock)
    await first.close()  # as a killed process: its session ends, its lease is not renewed
    clock.advance(LEAD_TTL + 1)
    assert await _contend(second, "b", clock)


async def test_each_environment_has_its_own_maintenance_leader(make_runtime: Factory) -> None:
    clock = ManualClock(datetime(2030, 1, 1, tzinfo=UTC))
    _, record = _recorder()
    first = await make_runtime([record], clock=clock, env="lead-one")
    second = await make_runtime([record], clock=clock, env="lead-two")
    assert await _contend(first, "a", clock)
    assert await _contend(second, "b", clock)


async def test_polling_workers_elect_one_maintenance_leader_that_fires_each_slot_once(
    make_runtime: Factory, caplog: pytest.LogCaptureFixture
) -> None:
    @task("beats", schedules=[schedule("beats.every-200ms", every="200ms")])
    async def beats(payload: Any, ctx: Context) -> None:
        return None

    runtimes = [await make_runtime([beats]) for _ in range(3)]
    workers = [
        rl.worker(worker_id=f"w{i}", maintenance_interval="50ms", handle_signals=False)
        for i, rl in enumerate(runtimes)
    ]
    with caplog.at_level(logging.INFO, logger="runlane.maintenance"):
        running = [asyncio.create_task(worker.run()) for worker in workers]
        await asyncio.sleep(2.0)
        for worker in workers:
            await worker.stop()
        await asyncio.gather(*running)
    fired = [r.source.occurs_at for r in await _all_runs(runtimes[0])]
    assert len(fired) >= 3
    assert len(set(fired)) == len(fired)
    leaders = {r.getMessage().split(":")[0] for r in caplog.records if ": leads " in r.getMessage()}
    assert len(leaders) == 1, leaders


async def test_a_leading_worker_that_stops_hands_the_lead_over_at_once(
    make_runtime: Factory,
) -> None:
    _, record = _recorder()
    rl = await make_runtime([record])
    # Its lead would last 30s if it were not handed over.
    worker = rl.worker(worker_id="leader", maintenance_interval="10s", handle_signals=False)
    running = asyncio.create_task(worker.run())
    newcomer = await make_runtime([record])

    async def contend() -> bool:
        now = newcomer.clock.now()
        return await newcomer.storage.hold_maintenance_lead(rl.environment, "next", now, 30.0)

    await asyncio.sleep(0.5)
    assert not await contend()
    await worker.stop()
    await running
    assert await contend()


async def test_a_worker_without_maintenance_leaves_schedules_to_tick(
    make_runtime: Factory,
) -> None:
    @task("beats", schedules=[schedule("beats.every-200ms", every="200ms")])
    async def beats(payload: Any, ctx: Context) -> None:
        return None

    rl = await make_runtime([beats])
    worker = rl.worker(maintenance=False, handle_signals=False)
    assert worker.maintenance_interval is None
    running = asyncio.create_task(worker.run())
    await asyncio.sleep(1.0)
    await worker.stop()
    await running
    assert await rl.storage.get_schedule_states(rl.environment) == {}
    assert await _all_runs(rl) == []


# -- durable queue capacity --------------------------------------------------------------

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


# -- settling and claiming in one write (optional operation) ---------------------------------


def _settles_and_claims(rl: Runlane) -> SettlesAndClaims:
    if not isinstance(rl.storage, SettlesAndClaims):
        pytest.skip("the driver does not settle and claim in one write")
    return rl.storage


async def test_settling_and_claiming_in_one_write_stores_both_with_their_history(
    make_runtime: Factory,
) -> None:
    from runlane.core.transitions import Succeeded, settle_attempt

    _, record = _recorder()
    rl = await make_runtime([record])
    storage = _settles_and_claims(rl)
    await rl.trigger_many(record, [{"order_id": i} for i in range(5)])
    held = await _claim(rl, [MAIN], limit=2)
    now = rl.clock.now()
    transitions = [
        settle_attempt(run, Succeeded({"ok": run.id}), record.retry, now) for run in held
    ]
    request = LeaseRequest("claimer", now + timedelta(seconds=30))
    policies = rl.registry.policies_for([MAIN])
    applied, claimed = await storage.apply_transitions_and_claim(
        rl.environment, transitions, now, policies, 2, request
    )
    assert applied == [True, True]
    assert len(claimed) == 2 and not {r.id for r in claimed} & {r.id for r in held}
    for run in held:
        stored = await rl.runs.get(run.id)
        assert stored.status is RunStatus.SUCCEEDED and stored.result == {"ok": run.id}
        assert stored.lease is None
        assert await _event_types(rl, run.id) == ["run.created", "run.started", "run.succeeded"]
    for run in claimed:
        assert await rl.storage.get_run(rl.environment, run.id) == run
        assert run.status is RunStatus.RUNNING and run.attempt == 1 and run.lease is not None
        assert await _event_types(rl, run.id) == ["run.created", "run.started"]
    waiting = [r for r in await _all_runs(rl) if r.status is RunStatus.QUEUED]
    assert len(waiting) == 1


async def test_a_claim_made_with_settles_sees_what_they_wrote(make_runtime: Factory) -> None:
    from runlane.core.transitions import Released, Succeeded, settle_attempt

    _, record = _recorder()
    rl = await make_runtime([record], queues=[MAIN, SERIAL])
    storage = _settles_and_claims(rl)
    serial = await rl.trigger_many(record, [{"order_id": i} for i in range(2)], queue=SERIAL)
    (held,) = await _claim(rl, [SERIAL])
    now = rl.clock.now()
    request = LeaseRequest("claimer", now + timedelta(seconds=30))
    # The settle frees the serial queue's only slot: the claim takes the next run.
    done = settle_attempt(held, Succeeded(None), record.retry, now)
    applied, claimed = await storage.apply_transitions_and_claim(
        rl.environment, [done], now, rl.registry.policies_for([SERIAL]), 5, request
    )
    (waiting,) = [run for run in serial if run.id != held.id]
    assert applied == [True] and [run.id for run in claimed] == [waiting.id]
    # A release due at once is claimable again by the claim riding on it.
    (again,) = claimed
    released = settle_attempt(again, Released(0.0, "later"), record.retry, now)
    applied, claimed = await storage.apply_transitions_and_claim(
        rl.environment, [released], now, rl.registry.policies_for([SERIAL]), 5, request
    )
    assert applied == [True] and [(run.id, run.attempt) for run in claimed] == [(again.id, 2)]
    assert await _event_types(rl, again.id) == [
        "run.created", "run.started", "run.released", "run.started",
    ]  # fmt: skip


async def test_a_stale_settle_fails_alone_and_the_claim_still_happens(
    make_runtime: Factory,
) -> None:
    from runlane.core.transitions import Succeeded, settle_attempt

    _, record = _recorder()
    rl = await make_runtime([record])
    storage = _settles_and_claims(rl)
    await rl.trigger_many(record, [{"order_id": i} for i in range(3)])
    first, second = await _claim(rl, [MAIN], limit=2)
    now = rl.clock.now()
    await rl.runs.cancel(first.id)  # moves the run on: the settle computed before is stale
    transitions = [
        settle_attempt(first, Succeeded(None), record.retry, now),
        settle_attempt(second, Succeeded(None), record.retry, now),
    ]
    request = LeaseRequest("claimer", now + timedelta(seconds=30))
    applied, claimed = await storage.apply_transitions_and_claim(
        rl.environment, transitions, now, rl.registry.policies_for([MAIN]), 5, request
    )
    assert applied == [False, True] and len(claimed) == 1
    assert (await rl.runs.get(first.id)).status is RunStatus.CANCELLATION_REQUESTED
    assert (await rl.runs.get(second.id)).status is RunStatus.SUCCEEDED


# -- outbox and deliveries (transport lanes) ---------------------------------------------------


@pytest.fixture
async def make_transport_runtime(
    lane_factory: Callable[[], Lane], environment: str
) -> AsyncIterator[Callable[..., Awaitable[tuple[Runlane, MemoryTransport]]]]:
    """Runtimes whose lane has an in-memory transport recording published wakeups."""
    opened: list[Runlane] = []

    async def build(
        tasks: Sequence[TaskDef[Any]],
        *,
        queues: Sequence[Any] = (MAIN, OTHER),
        clock: ManualClock | None = None,
        transport: MemoryTransport | None = None,
        **options: Any,
    ) -> tuple[Runlane, MemoryTransport]:
        transport = transport or MemoryTransport(list(queues))
        rl = Runlane(
            lane=Lane(lane_factory().storage, transport),
            queues=list(queues),
            tasks=list(tasks),
            environment=environment,
            clock=clock,
            **options,
        )
        await rl.migrate()
        await rl.open()
        opened.append(rl)
        return rl, transport

    yield build
    for rl in opened:
        await rl.close()


TransportFactory = Callable[..., Awaitable[tuple[Runlane, MemoryTransport]]]


def _message(rl: Runlane, run: Run, **changes: Any) -> DeliveryMessage:
    fields: dict[str, Any] = {"environment": rl.environment, "run_id": run.id, "queue": run.queue}
    fields.update(changes)
    return DeliveryMessage(**fields)


async def test_a_trigger_on_a_transport_lane_publishes_one_wakeup_after_commit(
    make_transport_runtime: TransportFactory,
) -> None:
    _, record = _recorder()
    rl, transport = await make_transport_runtime([record])
    run = await rl.trigger(record, {"order_id": 1}, trace_carrier={"traceparent": "t"})
    (published,) = transport.published
    assert published.message.run_id == run.id and published.message.queue == "main"
    assert published.message.environment == rl.environment
    assert published.message.trace_carrier == {"traceparent": "t"}
    assert await _event_types(rl, run.id) == ["run.created", "run.delivery_requested"]
    assert (await rl.tick()).outbox_published == 0
    result = await rl.execute_delivery(published.message)
    assert result.outcome is DeliveryOutcome.EXECUTED
    assert result.run is not None and result.run.status is RunStatus.SUCCEEDED
    again = await rl.execute_delivery(published.message)
    assert again.outcome is DeliveryOutcome.IGNORED and again.reason is IgnoredReason.TERMINAL


async def test_stale_and_foreign_wakeups_are_ignored_with_a_reason(
    make_transport_runtime: TransportFactory,
) -> None:
    clock = ManualClock()
    _, record = _recorder()
    rl, _ = await make_transport_runtime([record], clock=clock)
    run = await rl.trigger(record, {"order_id": 1})
    later = await rl.trigger(record, {"order_id": 2}, delay="1h")
    cases = [
        (_message(rl, run, environment="elsewhere"), IgnoredReason.ENVIRONMENT_MISMATCH),
        (_message(rl, run, run_id="no-such-run"), IgnoredReason.NOT_FOUND),
        (_message(rl, run, queue="other"), IgnoredReason.WRONG_QUEUE),
        (_message(rl, later), IgnoredReason.NOT_DUE),
    ]
    for message, reason in cases:
        result = await rl.execute_delivery(message)
        assert (result.outcome, result.reason) == (DeliveryOutcome.IGNORED, reason)
    lease = LeaseRequest("someone", clock.now() + timedelta(seconds=30))
    await rl.storage.claim_run(rl.environment, run.id, lease, clock.now())
    leased = await rl.execute_delivery(_message(rl, run))
    assert leased.reason is IgnoredReason.ALREADY_LEASED
    assert (await rl.runs.get(later.id)).status is RunStatus.SCHEDULED


async def test_a_transport_outage_never_fails_a_trigger_and_tick_republishes(
    make_transport_runtime: TransportFactory,
) -> None:
    clock = ManualClock()
    _, record = _recorder()
    rl, transport = await make_transport_runtime([record], clock=clock)
    transport.fail_with = RunlaneError(ErrorCode.TRANSPORT_UNAVAILABLE, "down", retryable=True)
    run = await rl.trigger(record, {"order_id": 1})
    assert (await rl.runs.get(run.id)).status is RunStatus.QUEUED
    assert transport.published == []
    report = await rl.tick()
    assert report.outbox_published == 0
    transport.fail_with = None
    clock.advance("5m")
    report = await rl.tick()
    assert report.outbox_published == 1
    assert [a.message.run_id for a in transport.published] == [run.id]
    assert (await rl.tick()).outbox_published == 0


async def test_outbox_backlog_counts_delivery_requests_until_they_are_published(
    make_transport_runtime: TransportFactory,
) -> None:
    clock = ManualClock()
    _, record = _recorder()
    rl, transport = await make_transport_runtime([record], clock=clock)
    transport.fail_with = RunlaneError(ErrorCode.TRANSPORT_UNAVAILABLE, "down", retryable=True)
    await rl.trigger(record, {"order_id": 1})
    await rl.trigger(record, {"order_id": 2})
    await rl.trigger(record, {"order_id": 3}, queue=OTHER)
    assert await rl.outbox_backlog() == {"main": 2, "other": 1}
    transport.fail_with = None
    clock.advance("5m")
    assert (await rl.tick()).outbox_published == 3
    assert await rl.outbox_backlog() == {"main": 0, "other": 0}


async def test_runs_that_become_due_later_get_a_wakeup_from_tick(
    make_transport_runtime: TransportFactory,
) -> None:
    clock = ManualClock()

    @task("flaky.wakeups", retry=RetryPolicy(max_attempts=2, initial_delay="10s", max_delay="10s"))
    async def flaky(payload: Any, ctx: Context) -> str:
        if ctx.attempt == 1:
            raise RuntimeError("first try fails")
        return "ok"

    rl, transport = await make_transport_runtime([flaky], clock=clock)
    delayed = await rl.trigger(flaky, None, delay="1m")
    assert transport.published == []
    assert (await rl.tick()).deliveries_requested == 0
    clock.advance("1m")
    report = await rl.tick()
    assert report.deliveries_requested == 1 and report.outbox_published == 1
    first = await rl.execute_delivery(transport.published[-1].message)
    assert first.run is not None and first.run.status is RunStatus.RETRYING
    assert (await rl.tick()).deliveries_requested == 0
    clock.advance("10s")
    assert (await rl.tick()).deliveries_requested == 1
    second = await rl.execute_delivery(transport.published[-1].message)
    assert second.run is not None and second.run.status is RunStatus.SUCCEEDED
    types = await _event_types(rl, delayed.id)
    assert types.count("run.delivery_requested") == 2


async def test_concurrent_ticks_publish_each_outbox_message_once(
    make_transport_runtime: TransportFactory,
) -> None:
    clock = ManualClock()
    _, record = _recorder()
    transport = MemoryTransport([MAIN, OTHER])
    runtimes = [
        (
            await make_transport_runtime(
                [record], clock=clock, transport=transport, dispatch="deferred"
            )
        )[0]
        for _ in range(3)
    ]
    runs = await runtimes[0].trigger_many(record, [{"order_id": i} for i in range(250)])
    assert transport.published == []
    reports = await asyncio.gather(*(rl.tick() for rl in runtimes))
    assert sum(r.outbox_published for r in reports) == 250
    assert sorted(a.message.run_id for a in transport.published) == sorted(r.id for r in runs)


async def test_bounded_queues_dispatch_only_within_reserved_capacity(
    make_transport_runtime: TransportFactory,
) -> None:
    clock = ManualClock()
    bounded = queue("bounded", concurrency_limit=2, dispatch_timeout="1m")

    @task("bounded.work", queue=bounded)
    async def work(payload: Any, ctx: Context) -> None:
        return None

    rl, transport = await make_transport_runtime([work], queues=[MAIN, bounded], clock=clock)
    await rl.trigger_many(work, [None] * 5)
    assert transport.published == []
    report = await rl.tick()
    assert report.deliveries_requested == 2 and report.outbox_published == 2
    assert (await rl.tick()).deliveries_requested == 0
    stats = next(s for s in await rl.queue_stats() if s.queue == "bounded")
    assert stats.waiting == 5 and stats.occupied == 2, "two runs hold reservations"
    first = await rl.execute_delivery(transport.published[0].message)
    assert first.outcome is DeliveryOutcome.EXECUTED
    assert (await rl.tick()).deliveries_requested == 1
    clock.advance("61s")
    report = await rl.tick()
    assert report.reservations_expired == 2 and report.deliveries_requested == 2
    stale = await rl.execute_delivery(transport.published[1].message)
    assert stale.outcome is DeliveryOutcome.EXECUTED


async def test_a_lane_transport_must_bind_every_queue_without_drift(
    lane_factory: Callable[[], Lane], environment: str
) -> None:
    _, record = _recorder()
    with pytest.raises(RunlaneError) as missing:
        Runlane(
            lane=Lane(lane_factory().storage, MemoryTransport([MAIN])),
            queues=[MAIN, OTHER],
            tasks=[record],
            environment=environment,
        )
    assert missing.value.code is ErrorCode.CONFIGURATION_INVALID
    with pytest.raises(RunlaneError) as drift:
        Runlane(
            lane=Lane(
                lane_factory().storage, MemoryTransport([MAIN, queue("other", concurrency_limit=1)])
            ),
            queues=[MAIN, OTHER],
            tasks=[record],
            environment=environment,
        )
    assert drift.value.code is ErrorCode.QUEUE_POLICY_DRIFT


__all__ = [name for name in dir() if name.startswith("test_")] + [
    "make_runtime",
    "make_transport_runtime",
    "pytestmark",
]
pytestmark = pytest.mark.asyncio
