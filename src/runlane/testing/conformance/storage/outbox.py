"""The outbox and deliveries on transport lanes."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from runlane import (
    Context,
    ErrorCode,
    Lane,
    ManualClock,
    RetryPolicy,
    Runlane,
    RunlaneError,
    RunStatus,
    queue,
    task,
)
from runlane.ports.storage import LeaseRequest
from runlane.ports.transport import DeliveryOutcome, IgnoredReason
from runlane.testing.conformance.storage.support import (
    MAIN,
    OTHER,
    TransportFactory,
    _event_types,
    _message,
    _recorder,
)
from runlane.transport.memory import MemoryTransport


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


__all__ = [name for name in dir() if name.startswith("test_")]
pytestmark = pytest.mark.asyncio
