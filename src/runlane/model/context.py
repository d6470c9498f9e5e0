"""What a task sees while it runs: :class:`Context`, its stop :class:`Signal`, and releases."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol

from runlane.model.progress import MAX_PROGRESS_MESSAGE_CHARS, check_progress
from runlane.types.carriers import load_carrier
from runlane.types.durations import Duration, parse_duration
from runlane.types.errors import ErrorCode, RunlaneError
from runlane.types.runs import Run


class SignalReason(StrEnum):
    """Why a running task is asked to stop."""

    CANCELLED = "cancelled"
    LEASE_LOST = "lease_lost"
    TIMEOUT = "timeout"
    SHUTDOWN = "shutdown"


class Signal:
    """A one-shot stop signal, usable from async code and from sync code in threads.

    ``is_set()`` polls it; ``await wait()`` blocks until it is set; ``reason``
    says why. The first reason wins.
    """

    def __init__(self) -> None:
        self._reason: SignalReason | None = None
        # Created on first use: most signals are never waited on from a thread.
        self._thread_event: threading.Event | None = None
        self._loop_events: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []
        # Callback -> times added, in order of first addition: a signal may gain and
        # lose many callbacks over its life, so removal must not scan a list.
        self._callbacks: dict[Callable[[SignalReason], None], int] = {}
        self._lock = threading.Lock()
        #: The signal this one follows (see child_of), while it does.
        self._parent: Signal | None = None
        #: Whether this signal is among the parent's callbacks (something waits on it).
        self._linked = False

    @classmethod
    def child_of(cls, parent: Signal) -> Signal:
        """A signal that is also set, with the parent's reason, when ``parent`` is
        (unless it was set first itself), until :meth:`detach` is called.

        An attempt's signal follows its worker's stop signal this way. It becomes one of
        the parent's callbacks only once something waits on it or adds a callback to
        it; until then it reads the parent's reason when asked, so the many attempts
        nobody waits on cost the parent nothing.
        """
        child = cls()
        child._parent = parent
        return child

    def detach(self) -> None:
        """Stop following the parent (see :meth:`child_of`); a reason the parent has by
        now stays this signal's, if it had none of its own."""
        parent = self._parent
        if parent is None:
            return
        if self._linked:
            parent.remove_callback(self.set)
            self._linked = False
        reason = parent.reason
        self._parent = None
        if reason is not None:
            self.set(reason)  # keeps its own reason if it had one first

    @property
    def reason(self) -> SignalReason | None:
        """Why the signal was set, or ``None`` while it is not."""
        reason = self._reason
        parent = self._parent  # read once: detach() may clear it from another thread
        if reason is None and parent is not None:
            return parent.reason
        return reason

    def is_set(self) -> bool:
        """Whether the task has been asked to stop."""
        return self.reason is not None

    def set(self, reason: SignalReason) -> None:
        """Ask the task to stop (first reason wins)."""
        with self._lock:
            if self._reason is not None:
                return
            parent = self._parent
            if parent is not None:
                # The parent's reason, if it has one, came first.
                reason = parent.reason or reason
            self._reason = reason
            waiters, self._loop_events = self._loop_events, []
            callbacks, self._callbacks = self._callbacks, {}
        if self._thread_event is not None:
            self._thread_event.set()
        for loop, event in waiters:
            if loop.is_closed():
                continue
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(event.set)
        for callback, times in callbacks.items():
            for _ in range(times):
                callback(reason)

    def _link(self) -> None:
        """Be told when the parent is set: something waits on this signal now."""
        parent = self._parent
        if parent is None:
            return
        with self._lock:
            if self._linked:
                return
            self._linked = True
        # Outside the lock: a parent that is set already calls set() at once.
        parent.add_callback(self.set)
        if self._parent is None:
            # Detached meanwhile (from another thread): do not stay among its callbacks.
            parent.remove_callback(self.set)

    def add_callback(self, callback: Callable[[SignalReason], None]) -> None:
        """Call ``callback(reason)`` when the signal is set (at once if it already is)."""
        with self._lock:
            reason = self.reason
            if reason is None:
                self._callbacks[callback] = self._callbacks.get(callback, 0) + 1
        if reason is None:
            self._link()
        else:
            callback(reason)

    def remove_callback(self, callback: Callable[[SignalReason], None]) -> None:
        """Forget a callback added with :meth:`add_callback` (no error if it is gone)."""
        with self._lock:
            times = self._callbacks.get(callback, 0)
            if times > 1:
                self._callbacks[callback] = times - 1
            elif times:
                del self._callbacks[callback]

    async def wait(self) -> SignalReason:
        """Wait until the signal is set and return the reason."""
        with self._lock:
            reason = self.reason
            if reason is not None:
                return reason
            waiter = (asyncio.get_running_loop(), asyncio.Event())
            self._loop_events.append(waiter)
        self._link()
        try:
            await waiter[1].wait()
        finally:
            # Waits are often abandoned (a worker idles on its stop signal many times):
            # do not keep one entry per abandoned wait.
            with self._lock:
                if waiter in self._loop_events:
                    self._loop_events.remove(waiter)
        reason = self.reason
        assert reason is not None
        return reason

    def wait_sync(self, timeout: float | None = None) -> bool:
        """Block the calling thread until the signal is set (for sync tasks)."""
        with self._lock:
            if self.reason is not None:
                return True
            if self._thread_event is None:
                self._thread_event = threading.Event()
            event = self._thread_event
        self._link()
        return event.wait(timeout)


@dataclass(frozen=True, slots=True)
class Release:
    """Returned by a task to wait and run again later; not a failure, no retry spent."""

    delay: float
    reason: str | None = None


class ProgressSink(Protocol):
    """Where a context's checked progress reports go (the attempt's reporter).

    ``ctx.progress`` keeps the usual report by setting :attr:`latest` and returning
    :attr:`queued`, calling :meth:`queue` only when that is ``None``: no call into the
    sink per report (a call cost a third of a report). Other reports go to :meth:`offer`.
    """

    #: The latest report's fields, as :class:`~runlane.model.progress.ProgressReport`
    #: has them (``None`` before the first).
    latest: tuple[float, str | None, str | None] | None

    @property
    def queued(self) -> Awaitable[None] | None:
        """What ``ctx.progress`` returns while the sink will store :attr:`latest`
        without being told (an awaitable that is already done), else ``None``."""

    def queue(self) -> Awaitable[None]:
        """Store :attr:`latest` soon; return what :attr:`queued` now is."""

    def offer(self, fraction: float, message: str | None, data_json: str | None) -> Awaitable[None]:
        """Take a checked report (its fields, as :class:`~runlane.model.progress.ProgressReport`
        has them) as the latest value, from the attempt's event loop; return what
        ``ctx.progress`` returns: an awaitable that is already done (the writes happen
        later, in the background)."""

    def offer_threadsafe(self, fraction: float, message: str | None, data_json: str | None) -> None:
        """:meth:`offer`, from any thread (sync tasks)."""


class Context:
    """Passed to every task call as its second argument."""

    def __init__(
        self,
        *,
        run_id: str,
        task_id: str,
        queue: str,
        attempt: int,
        signal: Signal,
        scheduled_for: datetime | None,
        trace_carrier: dict[str, str] | str | None,
        heartbeat: Callable[[], Awaitable[None]],
        worker_id: str,
        progress: ProgressSink | None = None,
        dependencies: Callable[[str], Awaitable[list[Run]]] | None = None,
    ) -> None:
        self.run_id = run_id
        self.task_id = task_id
        self.queue = queue
        self.attempt = attempt
        self.signal = signal
        self.scheduled_for = scheduled_for
        self._trace_carrier: Any = trace_carrier
        self.worker_id = worker_id
        self._heartbeat = heartbeat
        self._progress = progress
        self._dependencies = dependencies
        # Where dependencies_sync sends its read from a sync task's thread.
        try:
            self._loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            self._loop = None

    @property
    def trace_carrier(self) -> dict[str, str] | None:
        """The run's stored trace carrier (decoded when first read: see
        ``Run.trace_carrier``)."""
        carrier = self._trace_carrier
        if type(carrier) is str or type(carrier) is bytes:
            carrier = self._trace_carrier = load_carrier(carrier)
        return carrier  # type: ignore[no-any-return]

    @trace_carrier.setter
    def trace_carrier(self, carrier: dict[str, str] | None) -> None:
        self._trace_carrier = carrier

    def is_cancellation_requested(self) -> bool:
        """Whether an operator asked to cancel this run."""
        return self.signal.reason is SignalReason.CANCELLED

    def release(self, delay: Duration, reason: str | None = None) -> Release:
        """Build a release; ``return ctx.release("30s")`` to run again after 30 s.

        >>> return ctx.release("1m", reason="export not ready")
        """
        return Release(parse_duration(delay, name="release delay"), reason)

    async def heartbeat(self) -> None:
        """Extend the lease now (workers also do this on their own)."""
        await self._heartbeat()

    def progress(
        self, fraction: float, message: str | None = None, data: Any = None
    ) -> Awaitable[None]:
        """Report how far the task got: ``fraction`` in [0, 1], an optional ``message``
        (at most 500 characters) and optional JSON ``data`` (at most 8 KiB).

        The value is stored on the run (``run.progress``) at most once a second, and the
        latest one before the attempt settles. Bad values raise ``CONFIGURATION_INVALID``
        here. Reports of an attempt that lost its lease are dropped. The report is taken
        when called; the awaitable returned is already done.

        >>> await ctx.progress(page / pages, message=f"page {page} of {pages}")
        """
        sink = self._progress
        if sink is None:
            raise _no_progress()
        # The usual report (a float and an ASCII message) checked right here, as
        # check_progress would accept it: tasks may report in tight loops, and a call
        # of check_progress and its report tuple cost more than the checks.
        if (
            type(fraction) is float
            and 0.0 <= fraction <= 1.0
            and data is None
            and (
                message is None
                or (
                    type(message) is str
                    and len(message) <= MAX_PROGRESS_MESSAGE_CHARS
                    and message.isascii()
                    and "\x00" not in message
                )
            )
        ):
            sink.latest = (fraction, message, None)
            return sink.queued or sink.queue()
        return sink.offer(*check_progress(fraction, message, data))

    def progress_sync(self, fraction: float, message: str | None = None, data: Any = None) -> None:
        """:meth:`progress` for sync tasks (which run in a thread)."""
        sink = self._progress
        if sink is None:
            raise _no_progress()
        sink.offer_threadsafe(*check_progress(fraction, message, data))

    async def dependencies(self) -> list[Run]:
        """The runs this run was triggered ``after``, in the order given, as they are
        now (status, result, failure), read in one query; empty without any.

        >>> extracted, transformed = await ctx.dependencies()
        >>> rows = transformed.result["rows"]
        """
        if self._dependencies is None:
            return []
        return await self._dependencies(self.run_id)

    def dependencies_sync(self) -> list[Run]:
        """:meth:`dependencies` for a sync task (which runs in a worker thread)."""
        loop = self._loop
        if loop is None or self._dependencies is None:
            return []
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            raise RunlaneError(
                ErrorCode.CONFIGURATION_INVALID,
                "ctx.dependencies_sync() blocks: call it from a sync task; "
                "an async task awaits ctx.dependencies().",
            )
        return asyncio.run_coroutine_threadsafe(self.dependencies(), loop).result()

    def __repr__(self) -> str:
        return f"Context(run_id={self.run_id!r}, task_id={self.task_id!r}, attempt={self.attempt})"


def _no_progress() -> RunlaneError:
    return RunlaneError(
        ErrorCode.CAPABILITY_UNSUPPORTED,
        "progress is stored only for task runs executed from storage "
        "(a worker, execute_next, execute_delivery or run_now).",
    )
