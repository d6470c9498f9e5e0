"""``rl.runs.wait``: the terminal run, ``TimeoutError`` past the timeout, ``RUN_NOT_FOUND``
for an unknown id, across runtimes on one store (each with its own storage, as two
processes have)."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

from runlane import Context, ErrorCode, RetryPolicy, RunlaneError, RunStatus, task
from runlane.testing.conformance.storage.support import Factory, make_runtime


@task("waits.echo")
async def echo(payload: Any, ctx: Context) -> Any:
    return payload


@task("waits.boom", retry=RetryPolicy(max_attempts=1))
async def boom(payload: Any, ctx: Context) -> None:
    raise ValueError("boom")


async def test_wait_returns_the_run_another_runtime_finished(make_runtime: Factory) -> None:
    waiter = await make_runtime([echo])
    worker = await make_runtime([echo])
    run = await waiter.trigger(echo, {"n": 1})
    waiting = asyncio.ensure_future(waiter.runs.wait(run.id, timeout="10s"))
    await asyncio.sleep(0.1)
    assert not waiting.done()
    assert await worker.execute_next() is not None
    finished = await asyncio.wait_for(waiting, 5)
    assert finished.id == run.id
    assert finished.status is RunStatus.SUCCEEDED
    assert finished.result == {"n": 1}


async def test_wait_returns_failed_and_cancelled_runs(make_runtime: Factory) -> None:
    rl = await make_runtime([echo, boom])
    failing = await rl.trigger(boom, None)
    waiting = asyncio.ensure_future(rl.runs.wait(failing.id, timeout="10s"))
    await rl.execute_next()
    assert (await asyncio.wait_for(waiting, 5)).status is RunStatus.FAILED
    later = await rl.trigger(echo, None, delay="1h")
    waiting = asyncio.ensure_future(rl.runs.wait(later.id, timeout="10s"))
    await rl.runs.cancel(later.id)
    assert (await asyncio.wait_for(waiting, 5)).status is RunStatus.CANCELLED


async def test_wait_on_a_finished_run_returns_it_even_with_a_zero_timeout(
    make_runtime: Factory,
) -> None:
    rl = await make_runtime([echo])
    run = await rl.trigger(echo, "done")
    await rl.execute_next()
    assert (await rl.runs.wait(run.id, timeout=0)).status is RunStatus.SUCCEEDED
    assert (await rl.runs.wait(run.id, timeout=None)).result == "done"


async def test_wait_raises_timeout_error_within_the_timeout_plus_a_second(
    make_runtime: Factory,
) -> None:
    rl = await make_runtime([echo])
    run = await rl.trigger(echo, None, delay="1h")
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(TimeoutError):
        await rl.runs.wait(run.id, timeout="300ms")
    assert 0.3 <= loop.time() - started < 1.3
    assert (await rl.runs.get(run.id)).status is RunStatus.SCHEDULED


async def test_wait_for_an_unknown_run_raises_run_not_found(make_runtime: Factory) -> None:
    rl = await make_runtime([echo])
    for run_id in ("no-such-run", "x" * 2000):
        with pytest.raises(RunlaneError) as raised:
            await rl.runs.wait(run_id, timeout="5s")
        assert raised.value.code is ErrorCode.RUN_NOT_FOUND


async def test_wait_for_a_run_of_another_environment_raises_run_not_found(
    make_runtime: Factory, environment: str
) -> None:
    rl = await make_runtime([echo])
    elsewhere = await make_runtime([echo], env=f"{environment}-other")
    run = await elsewhere.trigger(echo, None)
    with pytest.raises(RunlaneError) as raised:
        await rl.runs.wait(run.id, timeout="5s")
    assert raised.value.code is ErrorCode.RUN_NOT_FOUND


@pytest.mark.parametrize("timeout", [-1, "-5s", "soon", timedelta(seconds=-1), [1], True])
async def test_wait_with_a_negative_or_malformed_timeout_is_a_configuration_error(
    make_runtime: Factory,
    timeout: Any,  # noqa: ASYNC109
) -> None:
    rl = await make_runtime([echo])
    run = await rl.trigger(echo, None)
    with pytest.raises(RunlaneError) as raised:
        await rl.runs.wait(run.id, timeout=timeout)
    assert raised.value.code is ErrorCode.CONFIGURATION_INVALID
    assert (await rl.runs.get(run.id)).status is RunStatus.QUEUED


async def test_many_waiters_of_one_runtime_all_get_their_runs(make_runtime: Factory) -> None:
    waiter = await make_runtime([echo])
    worker = await make_runtime([echo])
    runs = await waiter.trigger_many(echo, list(range(200)))
    waits = [asyncio.ensure_future(waiter.runs.wait(run.id, timeout="20s")) for run in runs]
    # Two waits of the same run, and one given up, leave the others alone.
    twice = asyncio.ensure_future(waiter.runs.wait(runs[0].id, timeout="20s"))
    given_up = asyncio.ensure_future(waiter.runs.wait(runs[1].id, timeout="20s"))
    await asyncio.sleep(0.05)
    given_up.cancel()
    while await worker.execute_next() is not None:
        pass
    finished = await asyncio.wait_for(asyncio.gather(*waits, twice), 10)
    assert [run.result for run in finished] == [*range(200), 0]
    assert {run.status for run in finished} == {RunStatus.SUCCEEDED}


__all__ = [name for name in dir() if name.startswith("test_")] + ["make_runtime"]
pytestmark = pytest.mark.asyncio
