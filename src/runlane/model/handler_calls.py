"""How a handler is called: one rule for every task and subscription handler.

A worker's attempts (``runlane.core``) and the SNS Lambda consumer, which runs a
subscription's handler with no runtime (``runlane.transport.sns``), both call
handlers through :func:`call_handler`, so a handler behaves the same wherever it
runs. The rule lives here, in ``model``, because it belongs to what a task
definition means (how its function is invoked), and because ``transport`` may not
import ``core`` (the layers contract in ``pyproject.toml``).

The rule:

- An async handler without a time limit is awaited in the caller's own task.
- A sync handler runs in a thread pool, in a copy of the caller's contextvars, so a
  span or log context set around the call is visible inside it.
- With a time limit, the handler runs in a task of its own (or in its thread) and is
  waited for. Past the limit the signal is set to ``TIMEOUT`` first, so the handler's
  cleanup sees why it is being stopped, and then it is cancelled; a thread cannot be
  interrupted and is left to notice the signal.
- What the handler returned and the ``Exception`` it raised go to the caller's
  :class:`HandlerEnds`. A ``CancelledError`` the handler raised on its own counts as
  raised; a cancellation of the caller cancels the handler and propagates.
- ``SystemExit`` and ``KeyboardInterrupt`` propagate to the caller, always in the
  caller's task (never out of the event loop from the handler's task), so the caller
  can settle the attempt before the process ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from runlane.model.context import Signal, SignalReason

if TYPE_CHECKING:
    from concurrent.futures import Executor

#: What the handler was called for, as its caller tells it (a run, a subscription).
S = TypeVar("S")
#: What the caller makes of the handler's end.
E = TypeVar("E")


@dataclass(frozen=True, slots=True)
class HandlerEnds(Generic[S, E]):
    """What a handler's end means to one kind of caller, given what it was called for.

    Each caller builds one at import time, so a call allocates nothing for it.

    >>> ENDS = HandlerEnds(returned=succeeded, raised=failed, timed_out=too_slow)
    """

    #: The value the handler returned.
    returned: Callable[[S, Any], E]
    #: What the handler raised: an ``Exception``, or a ``CancelledError`` of its own.
    raised: Callable[[S, BaseException], E]
    #: The handler ran past its time limit (the seconds given) and was stopped.
    timed_out: Callable[[S, float], E]


async def call_handler(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    *,
    is_async: bool,
    time_limit: float | None,
    signal: Signal,
    threads: Callable[[], Executor] | None,
    subject: S,
    ends: HandlerEnds[S, E],
) -> E:
    """Call ``fn(*args)`` by the rule above and return what ``ends`` makes of its end.

    ``signal`` is the one the handler watches; ``threads`` gives the pool a sync
    handler runs in (called only when one runs; ``None``: the event loop's default
    executor). ``subject`` is handed to ``ends`` with the handler's end.
    """
    if is_async and time_limit is None:
        try:
            return ends.returned(subject, await fn(*args))
        except Exception as error:
            return ends.raised(subject, error)
        except asyncio.CancelledError as error:
            if being_cancelled():
                raise  # a real cancellation of the caller (a shutdown)
            return ends.raised(subject, error)
    job: asyncio.Future[Any]
    if is_async:
        job = asyncio.ensure_future(_guarded(fn(*args)))
    else:
        pool = threads() if threads is not None else None
        # In a copy of the caller's context: a span or log context set around the call
        # (an observer's, or the app's) is visible inside the sync handler too.
        job = asyncio.get_running_loop().run_in_executor(
            pool, contextvars.copy_context().run, fn, *args
        )
    try:
        done, _ = await asyncio.wait({job}, timeout=time_limit)
        if not done:
            assert time_limit is not None  # only a time limit leaves the job unfinished
            # Signal first so the handler's cleanup sees why it is being stopped; a
            # thread cannot be interrupted and is left to notice the signal.
            signal.set(SignalReason.TIMEOUT)
            job.cancel()
            with contextlib.suppress(BaseException):
                await job
            return ends.timed_out(subject, time_limit)
        value = job.result()
        if isinstance(value, _Escaped):
            raise value.error
        return ends.returned(subject, value)
    except asyncio.CancelledError as error:
        if being_cancelled():
            job.cancel()
            raise
        return ends.raised(subject, error)  # the handler cancelled itself: its own failure
    except Exception as error:
        return ends.raised(subject, error)


def being_cancelled() -> bool:
    """Whether the current asyncio task was asked to stop (not a ``CancelledError``
    that handler code raised on its own)."""
    current = asyncio.current_task()
    return current is not None and current.cancelling() > 0


@dataclass(frozen=True, slots=True)
class _Escaped:
    """A BaseException a time-limited handler raised, carried out of its asyncio task:
    raised there, SystemExit and KeyboardInterrupt would end the event loop before the
    caller could settle."""

    error: BaseException


async def _guarded(call: Awaitable[Any]) -> Any:
    try:
        return await call
    except (SystemExit, KeyboardInterrupt) as error:
        return _Escaped(error)
    except asyncio.CancelledError as error:
        if being_cancelled():
            raise
        return _Escaped(error)
