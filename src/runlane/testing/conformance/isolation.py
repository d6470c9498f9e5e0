"""Isolation conformance: one bad task, result, schedule or duty fails only itself.

Use it like the storage suite (same ``lane_factory`` and ``environment`` fixtures)::

    from runlane.testing.conformance.isolation import *  # noqa: F403
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from runlane import Context, RunStatus, task
from runlane.testing.conformance.storage import (
    Factory,
    make_runtime,
    make_transport_runtime,
)


def _nested(depth: int) -> Any:
    value: Any = []
    for _ in range(depth):
        value = [value]
    return value


class _Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no description")


# -- task code that misbehaves fails its own attempt -------------------------------------


async def test_an_exception_whose_str_raises_fails_the_attempt(make_runtime: Factory) -> None:
    @task("unprintable")
    async def unprintable(payload: Any, ctx: Context) -> None:
        raise _Unprintable

    rl = await make_runtime([unprintable])
    run = await rl.trigger(unprintable, None)
    settled = await rl.execute_next()
    assert settled is not None and settled.id == run.id
    assert settled.status is RunStatus.RETRYING
    assert settled.failure is not None and settled.failure.code == "task_failed"
    assert "_Unprintable" in settled.failure.message


@pytest.mark.parametrize("kind", ["sync", "time-limited"])
async def test_a_result_nested_too_deep_fails_the_attempt_at_once(
    make_runtime: Factory, kind: str
) -> None:
    if kind == "sync":

        @task("deep")
        def deep(payload: Any, ctx: Context) -> Any:
            return _nested(10_000)

    else:

        @task("deep", timeout="10s")
        async def deep(payload: Any, ctx: Context) -> Any:
            return _nested(10_000)

    rl = await make_runtime([deep])
    run = await rl.trigger(deep, None)
    settled = await rl.execute_next()
    assert settled is not None and settled.id == run.id
    assert settled.status is RunStatus.FAILED
    assert settled.failure is not None and settled.failure.code == "task_failed"
    assert settled.failure.retryable is False
    assert (await rl.runs.get(run.id)).status is RunStatus.FAILED


async def test_a_result_nested_within_the_cap_still_succeeds(make_runtime: Factory) -> None:
    @task("nested")
    def nested(payload: Any, ctx: Context) -> Any:
        return _nested(50)

    rl = await make_runtime([nested])
    await rl.trigger(nested, None)
    settled = await rl.execute_next()
    assert settled is not None and settled.status is RunStatus.SUCCEEDED
    assert settled.result == _nested(50)


@pytest.mark.parametrize("kind", ["async", "sync", "time-limited"])
async def test_a_task_cancelling_itself_fails_its_attempt_as_retryable(
    make_runtime: Factory, kind: str
) -> None:
    if kind == "sync":

        @task("self-cancel")
        def self_cancel(payload: Any, ctx: Context) -> None:
            raise asyncio.CancelledError

    else:

        @task("self-cancel", timeout="10s" if kind == "time-limited" else None)
        async def self_cancel(payload: Any, ctx: Context) -> None:
            raise asyncio.CancelledError

    rl = await make_runtime([self_cancel])
    run = await rl.trigger(self_cancel, None)
    settled = await rl.execute_next()
    assert settled is not None and settled.id == run.id
    assert settled.status is RunStatus.RETRYING
    assert settled.failure is not None and settled.failure.retryable
    assert "CancelledError" in settled.failure.message


@pytest.mark.parametrize("exit_type", [SystemExit, KeyboardInterrupt])
@pytest.mark.parametrize("kind", ["async", "sync", "time-limited"])
async def test_an_exit_from_task_code_settles_the_attempt_then_proceeds(
    make_runtime: Factory, exit_type: type[BaseException], kind: str
) -> None:
    if kind == "sync":

        @task("exits")
        def exits(payload: Any, ctx: Context) -> None:
            raise exit_type

    else:

        @task("exits", timeout="10s" if kind == "time-limited" else None)
        async def exits(payload: Any, ctx: Context) -> None:
            raise exit_type

    rl = await make_runtime([exits])
    run = await rl.trigger(exits, None)
    with pytest.raises(exit_type):
        await rl.execute_next()
    stored = await rl.runs.get(run.id)
    assert stored.status is RunStatus.RETRYING and stored.lease is None
    assert stored.failure is not None and stored.failure.retryable
    assert exit_type.__name__ in stored.failure.message


__all__ = [name for name in dir() if name.startswith("test_")] + [
    "make_runtime",
    "make_transport_runtime",
]
