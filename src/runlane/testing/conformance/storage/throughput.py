"""``rl.throughput_series``: what a runtime's attempts did, from the rollup it writes, as
chart points per window; read by another runtime on the same store."""

from __future__ import annotations

from typing import Any

import pytest

from runlane import (
    Context,
    ErrorCode,
    ManualClock,
    RetryPolicy,
    RunlaneError,
    WorkerMode,
    task,
)
from runlane.testing.conformance.storage.support import MAIN, OTHER, Factory, make_runtime


@task("charts.ok")
async def ok(payload: Any, ctx: Context) -> None:
    return None


@task("charts.flaky", retry=RetryPolicy(max_attempts=2, initial_delay="1s", jitter=False))
async def flaky(payload: Any, ctx: Context) -> None:
    raise ValueError("flaky")


@task("charts.other", queue=OTHER)
async def other(payload: Any, ctx: Context) -> None:
    return None


async def test_throughput_series_counts_what_attempts_did_per_minute_and_queue(
    make_runtime: Factory,
) -> None:
    clock = ManualClock()
    worker = await make_runtime([ok, flaky, other], clock=clock)
    await worker.trigger_many(ok, [None] * 3)
    await worker.trigger(flaky, None)
    await worker.trigger(other, None)
    clock.advance("2s")  # every start waited two seconds past its due time
    while await worker.execute_next() is not None:
        pass
    clock.advance("1m")
    assert await worker.execute_next() is not None  # the retry fails for good
    await worker.close()  # writes what it counted
    reader = await make_runtime([ok, flaky, other], clock=clock)

    main_hour = await reader.throughput_series(MAIN, window="1h")
    assert (main_hour.queue, main_hour.window, main_hour.bucket_seconds) == ("main", "1h", 60)
    assert len(main_hour.points) == 60
    busy = [p for p in main_hour.points if p.started]
    assert [(p.succeeded, p.failed, p.retried, p.started) for p in busy] == [
        (3, 0, 1, 4),
        (0, 1, 0, 1),
    ]
    total = main_hour.total
    assert (total.succeeded, total.failed, total.retried, total.cancelled) == (3, 1, 1, 0)
    assert total.started == 5
    assert total.latency_p50_ms == 2_500  # the bucket of two seconds
    assert busy[0].latency_p95_ms == 2_500
    everything = await reader.throughput_series(window="1d")
    assert everything.queue is None and everything.bucket_seconds == 900
    assert len(everything.points) == 96
    assert (everything.total.succeeded, everything.total.started) == (4, 6)
    other_hour = await reader.throughput_series("other")
    assert (other_hour.total.succeeded, other_hour.total.failed) == (1, 0)


async def test_a_workers_settles_are_counted_with_no_observer_attached(
    make_runtime: Factory,
) -> None:
    worker = await make_runtime([ok, flaky])
    assert not worker.observers  # counting keeps attempts on the no-observer path
    await worker.trigger_many(ok, [None] * 7)
    await worker.trigger(flaky, None)
    drain = worker.worker(concurrency=4, mode=WorkerMode.DRAIN, handle_signals=False)
    await drain.run()
    assert drain.executed == 8  # the flaky run's retry is not due yet
    await worker.close()
    reader = await make_runtime([ok, flaky])
    total = (await reader.throughput_series(MAIN, window="1h")).total
    assert (total.succeeded, total.retried, total.failed, total.started) == (7, 1, 0, 8)


async def test_throughput_series_is_empty_before_anything_ran(make_runtime: Factory) -> None:
    rl = await make_runtime([ok])
    series = await rl.throughput_series(window="1h")
    assert all(p.started == p.succeeded == 0 for p in series.points)
    assert series.total.latency_p50_ms is None and series.total.latency_p95_ms is None


@pytest.mark.parametrize(("queue", "window", "code"), [
    ("main", "2h", ErrorCode.CONFIGURATION_INVALID),
    (None, 3600, ErrorCode.CONFIGURATION_INVALID),
    ("missing", "1h", ErrorCode.QUEUE_NOT_FOUND),
])  # fmt: skip
async def test_throughput_series_refuses_unknown_windows_and_queues(
    make_runtime: Factory, queue: Any, window: Any, code: ErrorCode
) -> None:
    rl = await make_runtime([ok])
    with pytest.raises(RunlaneError) as raised:
        await rl.throughput_series(queue, window=window)
    assert raised.value.code is code


__all__ = [name for name in dir() if name.startswith("test_")] + ["make_runtime"]
pytestmark = pytest.mark.asyncio
