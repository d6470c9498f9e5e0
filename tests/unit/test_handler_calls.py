"""How a handler is called (``call_handler``): the one rule workers and the SNS consumer share."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import Any

import pytest

from runlane import Signal, SignalReason
from runlane.model.handler_calls import HandlerEnds, call_handler

#: Set around each call: a handler must see it, in its task or in its thread.
REQUEST = contextvars.ContextVar("request", default="none")

ENDS: HandlerEnds[str, tuple[str, Any]] = HandlerEnds(
    returned=lambda subject, value: ("returned", value),
    raised=lambda subject, error: ("raised", error),
    timed_out=lambda subject, limit: ("timed out", (subject, limit)),
)


async def _call(
    fn: Any,
    *,
    is_async: bool,
    time_limit: float | None = None,
    signal: Signal | None = None,
    threads: Any = None,
) -> tuple[str, Any]:
    REQUEST.set("r-1")
    return await call_handler(
        fn,
        ("payload", "ctx"),
        is_async=is_async,
        time_limit=time_limit,
        signal=signal or Signal(),
        threads=threads,
        subject="the run",
        ends=ENDS,
    )


@pytest.mark.parametrize("time_limit", [None, 5.0])
async def test_an_async_handler_gets_the_arguments_and_its_value_is_returned(
    time_limit: float | None,
) -> None:
    async def handler(payload: str, ctx: str) -> str:
        return f"{payload}/{ctx}/{REQUEST.get()}"

    assert await _call(handler, is_async=True, time_limit=time_limit) == (
        "returned",
        "payload/ctx/r-1",
    )


async def test_without_a_time_limit_an_async_handler_runs_in_the_callers_task() -> None:
    caller = asyncio.current_task()
    seen: list[asyncio.Task[Any] | None] = []

    async def handler(payload: str, ctx: str) -> None:
        seen.append(asyncio.current_task())

    await _call(handler, is_async=True)
    assert seen == [caller]


async def test_a_sync_handler_runs_in_the_given_pool_with_the_callers_context() -> None:
    caller = threading.current_thread()
    ran: list[tuple[threading.Thread, str]] = []
    asked: list[Executor] = []

    def handler(payload: str, ctx: str) -> str:
        ran.append((threading.current_thread(), REQUEST.get()))
        return "done"

    with ThreadPoolExecutor(1, thread_name_prefix="handlers") as pool:

        def threads() -> Executor:
            asked.append(pool)
            return pool

        assert await _call(handler, is_async=False, threads=threads) == ("returned", "done")
    assert asked == [pool]
    assert ran[0][0] is not caller and ran[0][0].name.startswith("handlers")
    assert ran[0][1] == "r-1"


async def test_without_a_pool_a_sync_handler_runs_in_the_loops_default_executor() -> None:
    def handler(payload: str, ctx: str) -> str:
        return threading.current_thread().name

    kind, thread = await _call(handler, is_async=False)
    assert kind == "returned" and thread.startswith("asyncio_")


@pytest.mark.parametrize("is_async", [True, False])
async def test_an_exception_the_handler_raises_is_handed_to_raised(is_async: bool) -> None:
    error = ValueError("boom")

    def fail(payload: str, ctx: str) -> None:
        raise error

    async def fail_async(payload: str, ctx: str) -> None:
        raise error

    assert await _call(fail_async if is_async else fail, is_async=is_async) == ("raised", error)


@pytest.mark.parametrize("is_async", [True, False])
async def test_past_its_time_limit_the_handler_is_signalled_first_then_stopped(
    is_async: bool,
) -> None:
    signal = Signal()
    seen_when_stopped: list[SignalReason | None] = []

    async def slow(payload: str, ctx: str) -> None:
        try:
            await asyncio.sleep(5)
        except asyncio.CancelledError:
            seen_when_stopped.append(signal.reason)
            raise

    def slow_sync(payload: str, ctx: str) -> None:
        signal.wait_sync(timeout=5)  # a thread is left to notice the signal

    ended = await _call(
        slow if is_async else slow_sync, is_async=is_async, time_limit=0.05, signal=signal
    )
    assert ended == ("timed out", ("the run", 0.05))
    assert signal.reason is SignalReason.TIMEOUT
    if is_async:
        assert seen_when_stopped == [SignalReason.TIMEOUT]


@pytest.mark.parametrize("time_limit", [None, 5.0])
async def test_a_cancelled_error_the_handler_raises_itself_is_handed_to_raised(
    time_limit: float | None,
) -> None:
    async def cancels_itself(payload: str, ctx: str) -> None:
        raise asyncio.CancelledError

    kind, error = await _call(cancels_itself, is_async=True, time_limit=time_limit)
    assert kind == "raised" and isinstance(error, asyncio.CancelledError)


@pytest.mark.parametrize("time_limit", [None, 5.0])
async def test_cancelling_the_caller_cancels_the_handler_and_propagates(
    time_limit: float | None,
) -> None:
    started, stopped = asyncio.Event(), asyncio.Event()

    async def waits(payload: str, ctx: str) -> None:
        started.set()
        try:
            await asyncio.sleep(5)
        finally:
            stopped.set()

    caller = asyncio.create_task(_call(waits, is_async=True, time_limit=time_limit))
    await started.wait()
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    await asyncio.wait_for(stopped.wait(), 1)


@pytest.mark.parametrize(("is_async", "time_limit"), [(True, None), (True, 5.0), (False, None)])
@pytest.mark.parametrize("exit_type", [SystemExit, KeyboardInterrupt])
async def test_system_exit_and_keyboard_interrupt_reach_the_caller_in_its_own_task(
    is_async: bool, time_limit: float | None, exit_type: type[BaseException]
) -> None:
    async def exits(payload: str, ctx: str) -> None:
        raise exit_type

    def exits_sync(payload: str, ctx: str) -> None:
        raise exit_type

    reached: list[type[BaseException]] = []

    async def caller() -> None:
        try:
            await _call(exits if is_async else exits_sync, is_async=is_async, time_limit=time_limit)
        except (SystemExit, KeyboardInterrupt) as error:
            reached.append(type(error))

    await caller()
    assert reached == [exit_type]
