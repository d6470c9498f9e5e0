"""``ctx.progress``: stored on the run while the attempt runs (at most once a second),
the last value flushed before the attempt settles and kept after the run ends, fenced
by the lease, and bad values refused in the handler."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import pytest

from runlane import (
    Context,
    ErrorCode,
    ManualClock,
    RetryPolicy,
    RunlaneError,
    RunStatus,
    Signal,
    task,
)
from runlane.testing.conformance.storage.support import Factory, make_runtime


@task("progress.pages")
async def pages(payload: Any, ctx: Context) -> str:
    for page in range(1, 11):
        await ctx.progress(page / 10, message=f"page {page} of 10", data={"page": page})
    return "done"


@task("progress.pages_sync")
def pages_sync(payload: Any, ctx: Context) -> str:
    for page in range(1, 5):
        ctx.progress_sync(page / 4, message=f"step {page}")
    return "done"


async def test_the_last_progress_is_stored_before_the_attempt_settles_and_kept(
    make_runtime: Factory,
) -> None:
    rl = await make_runtime([pages])
    run = await rl.trigger(pages, None)
    assert (await rl.runs.get(run.id)).progress is None
    await rl.execute_next()
    finished = await rl.runs.get(run.id)
    assert finished.status is RunStatus.SUCCEEDED
    progress = finished.progress
    assert progress is not None
    assert (progress.fraction, progress.message, progress.data) == (
        1.0,
        "page 10 of 10",
        {"page": 10},
    )
    assert progress.attempt == 1
    assert progress.updated_at <= finished.updated_at
    (listed,) = (await rl.runs.list(tasks=[pages])).data
    assert listed.progress == progress
    assert (await rl.runs.wait(run.id, timeout=0)).progress == progress


async def test_sync_tasks_report_progress_too(make_runtime: Factory) -> None:
    rl = await make_runtime([pages_sync])
    run = await rl.trigger(pages_sync, None)
    await rl.execute_next()
    progress = (await rl.runs.get(run.id)).progress
    assert progress is not None and (progress.fraction, progress.message) == (1.0, "step 4")


async def test_progress_is_stored_while_the_attempt_runs_at_most_once_a_second(
    make_runtime: Factory,
) -> None:
    go_on = asyncio.Event()

    @task("progress.long")
    async def long(payload: Any, ctx: Context) -> None:
        for step in range(100):
            await ctx.progress(step / 100, message=f"step {step}")
        await go_on.wait()

    rl = await make_runtime([long])
    observer = await make_runtime([long])
    run = await rl.trigger(long, None)
    executing = asyncio.ensure_future(rl.execute_next())
    await asyncio.sleep(0.3)
    # Reported a hundred times, but the first write waits for the first second.
    assert (await observer.runs.get(run.id)).progress is None
    for _ in range(40):
        await asyncio.sleep(0.05)
        seen = (await observer.runs.get(run.id)).progress
        if seen is not None:
            break
    assert seen is not None and seen.message == "step 99"
    assert (await observer.runs.get(run.id)).status is RunStatus.RUNNING
    go_on.set()
    await executing


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [
        ((1.5,), {}),
        ((-0.1,), {}),
        ((math.nan,), {}),
        (("half",), {}),
        ((True,), {}),
        ((0.5,), {"message": "x" * 501}),
        ((0.5,), {"message": 7}),
        ((0.5,), {"data": {"blob": "x" * 8200}}),
        ((0.5,), {"data": {"nan": math.nan}}),
        ((0.5,), {"data": {1, 2}}),
    ],
)
async def test_bad_progress_fails_the_attempt_with_configuration_invalid_and_stores_nothing(
    make_runtime: Factory, args: Any, kwargs: Any
) -> None:
    @task("progress.bad", retry=RetryPolicy(max_attempts=1))
    async def bad(payload: Any, ctx: Context) -> None:
        # Not every bad value is JSON, so they reach the handler through this closure.
        await ctx.progress(*args, **kwargs)

    rl = await make_runtime([bad])
    run = await rl.trigger(bad, None)
    failed = await rl.execute_next()
    assert failed is not None and failed.id == run.id
    assert failed.status is RunStatus.FAILED
    assert failed.failure is not None
    assert failed.failure.code == ErrorCode.CONFIGURATION_INVALID.value
    assert (await rl.runs.get(run.id)).progress is None


async def test_an_attempt_that_lost_its_lease_cannot_overwrite_the_progress_of_the_next(
    make_runtime: Factory,
) -> None:
    clock = ManualClock()
    first_may_end = asyncio.Event()
    first_started = asyncio.Event()

    @task("progress.fenced", retry=RetryPolicy(max_attempts=3, initial_delay="1s"))
    async def fenced(payload: Any, ctx: Context) -> None:
        if ctx.attempt == 1:
            first_started.set()
            await first_may_end.wait()
            await ctx.progress(0.1, message="stale")
        else:
            await ctx.progress(0.7, message="second attempt")

    stale = await make_runtime([fenced], clock=clock)
    fresh = await make_runtime([fenced], clock=clock)
    run = await stale.trigger(fenced, None)
    first = asyncio.ensure_future(stale.execute_next(lease_duration="5s"))
    await asyncio.wait_for(first_started.wait(), 5)
    clock.advance("10s")
    assert (await fresh.tick()).leases_recovered == 1
    clock.advance("1m")
    second = await fresh.execute_next()
    assert second is not None and second.status is RunStatus.SUCCEEDED
    first_may_end.set()
    await first
    progress = (await fresh.runs.get(run.id)).progress
    assert progress is not None
    assert (progress.fraction, progress.message, progress.attempt) == (0.7, "second attempt", 2)


async def test_progress_outside_a_stored_attempt_is_refused() -> None:
    ctx = Context(
        run_id="r",
        task_id="t",
        queue="main",
        attempt=1,
        signal=Signal(),
        scheduled_for=None,
        trace_carrier=None,
        heartbeat=_no_heartbeat,
        worker_id="w",
    )
    with pytest.raises(RunlaneError) as raised:
        await ctx.progress(0.5)
    assert raised.value.code is ErrorCode.CAPABILITY_UNSUPPORTED


async def _no_heartbeat() -> None:
    return None


__all__ = [name for name in dir() if name.startswith("test_")] + ["make_runtime"]
pytestmark = pytest.mark.asyncio
