"""``rl.sync``: the blocking facade for sync apps (Flask, Django, scripts).

The runtime runs on an event loop in a daemon thread; each blocking call
submits the matching coroutine there and waits for it. Use one runtime object
either through ``rl.sync`` or from your own event loop, not through both at
once: its storage's connections belong to the loop that opened them.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:
    from runlane.model.definitions import TaskDef
    from runlane.types.runs import Run

T = TypeVar("T")
P = TypeVar("P")


class _LoopThread:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._serve, name="runlane-sync", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("rl.sync cannot be used from inside a task run by rl.sync itself")
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        self.loop.close()


class _BlockingProxy:
    """Wraps an object so its coroutine methods block and its sub-APIs are wrapped too."""

    def __init__(self, target: Any, portal: Callable[[], _LoopThread]) -> None:
        self._target = target
        self._portal = portal

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._target, name)
        if inspect.iscoroutinefunction(value):

            def blocking(*args: Any, **kwargs: Any) -> Any:
                return self._portal().call(value(*args, **kwargs))

            blocking.__name__ = name
            blocking.__doc__ = value.__doc__
            return blocking
        if name in _SUB_APIS:
            return _BlockingProxy(value, self._portal)
        if name == "queues":
            return _BlockingMapping(value, self._portal)
        return value


class _BlockingMapping(_BlockingProxy):
    """A sub-API that is also a read-only mapping (``rl.queues``): lookups, ``in``
    and iteration go to the target as they are."""

    def __getitem__(self, key: Any) -> Any:
        return self._target[key]

    def __iter__(self) -> Any:
        return iter(self._target)

    def __len__(self) -> int:
        return len(self._target)

    def __contains__(self, key: object) -> bool:
        return key in self._target


_SUB_APIS = frozenset(
    {"runs", "idempotency_keys", "schedules", "dead_letters", "subscriptions", "groups"}
)


class Blockable(Protocol):
    """What the blocking facade wraps (``Runlane`` is one): the calls it spells out.
    Every other coroutine method of the target is made blocking on demand."""

    @property
    def trigger(self) -> Callable[..., Coroutine[Any, Any, Run]]:
        """``Runlane.trigger``."""
        ...

    @property
    def trigger_many(self) -> Callable[..., Coroutine[Any, Any, list[Run]]]:
        """``Runlane.trigger_many``."""
        ...

    @property
    def worker(self) -> Callable[..., Any]:
        """``Runlane.worker``: builds a worker whose ``run()`` is awaited."""
        ...

    async def close(self) -> None:
        """Close the runtime."""


class SyncRunlane(_BlockingProxy):
    """Blocking twins of every producer and operator coroutine: ``rl.sync.trigger(...)``,
    ``rl.sync.runs.get(...)``. ``rl.sync.close()`` closes the runtime and its thread."""

    def __init__(self, runtime: Blockable) -> None:
        self._thread: _LoopThread | None = None
        self._lock = threading.Lock()
        super().__init__(runtime, self._loop_thread)

    def _loop_thread(self) -> _LoopThread:
        with self._lock:
            if self._thread is None:
                self._thread = _LoopThread()
            return self._thread

    def call(self, awaitable: Coroutine[Any, Any, T]) -> T:
        """Run a coroutine on the runtime's loop and wait for its result.

        For helpers built on the async API, such as :mod:`runlane.testing.sync`:

        >>> rl.sync.call(rl.queue_stats())
        """
        return self._loop_thread().call(awaitable)

    # Spelled out (not left to the proxy) so type checkers see the payload types.
    def trigger(
        self, task: TaskDef[P] | str, payload: P | Mapping[str, Any] | None = None, **options: Any
    ) -> Run:
        """Blocking :meth:`Runlane.trigger <runlane.Runlane.trigger>`."""
        run: Run = self._loop_thread().call(self._target.trigger(task, payload, **options))
        return run

    def trigger_many(
        self,
        task: TaskDef[P] | str,
        payloads: Sequence[P | Mapping[str, Any] | None],
        **options: Any,
    ) -> list[Run]:
        """Blocking :meth:`Runlane.trigger_many <runlane.Runlane.trigger_many>`."""
        runs: list[Run] = self._loop_thread().call(
            self._target.trigger_many(task, payloads, **options)
        )
        return runs

    def run_worker(self, **options: Any) -> None:
        """Run a worker until it stops (DRAIN mode returns when no due work is left)."""
        runtime = self._target

        async def go() -> None:
            await runtime.worker(handle_signals=False, **options).run()

        self._loop_thread().call(go())

    def close(self) -> None:
        """Close the runtime and stop the background loop."""
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is not None:
            thread.call(self._target.close())
            thread.stop()
