"""Workers: local slots that claim due runs in batches and execute them."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal as os_signal
import threading
from collections.abc import Callable, Sequence
from enum import StrEnum
from typing import TYPE_CHECKING

from runlane.core.context import Signal, SignalReason
from runlane.core.errors import RunlaneError, configuration_error
from runlane.core.execution import LeaseSettings
from runlane.core.models import Run
from runlane.storage.protocol import QueuePolicy, WorkNotifier

if TYPE_CHECKING:
    from runlane.core.runtime import Runlane

logger = logging.getLogger("runlane.worker")

#: After a storage error the worker waits this long, doubling up to the maximum.
ERROR_BACKOFF_INITIAL = 0.5
ERROR_BACKOFF_MAX = 30.0
#: While attempts are running, the worker claims again once half of its slots
#: (at most this many) are free, so claims come in batches rather than one by one.
CLAIM_BATCH_DIVISOR = 2
MAX_CLAIM_BATCH_WAIT = 50


class WorkerMode(StrEnum):
    """``POLL`` runs until stopped; ``DRAIN`` returns once no due work is left."""

    POLL = "poll"
    DRAIN = "drain"


class Worker:
    """Claims due runs within ``concurrency`` local slots. Build it with ``rl.worker(...)``."""

    def __init__(
        self,
        runtime: Runlane,
        *,
        queues: Sequence[QueuePolicy],
        concurrency: int,
        mode: WorkerMode,
        lease: LeaseSettings,
        worker_id: str,
        poll_interval: float,
        handle_signals: bool,
        on_progress: Callable[[Run], None] | None,
    ) -> None:
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise configuration_error("worker concurrency must be a whole number of at least 1.")
        if not queues:
            raise configuration_error("the worker has no queues to claim from.")
        self._rt = runtime
        self.queues = list(queues)
        self.concurrency = concurrency
        self.mode = mode
        self.lease = lease
        self.worker_id = worker_id
        self.poll_interval = poll_interval
        self._handle_signals = handle_signals
        self._on_progress = on_progress
        self._stop = Signal()
        self._active: set[asyncio.Task[None]] = set()
        self._slot_freed: asyncio.Event | None = None
        self._claim_batch = max(1, min(concurrency // CLAIM_BATCH_DIVISOR, MAX_CLAIM_BATCH_WAIT))
        self.executed = 0

    async def stop(self) -> None:
        """Stop claiming; in-flight attempts are told to stop (SHUTDOWN) and finish."""
        self._stop.set(SignalReason.SHUTDOWN)

    @property
    def stopping(self) -> bool:
        """Whether :meth:`stop` was called (or a signal arrived)."""
        return self._stop.is_set()

    async def run(self) -> None:
        """Claim and execute until stopped (POLL) or until no due work is left (DRAIN)."""
        rt = self._rt
        await rt.open()
        loop = asyncio.get_running_loop()
        self._slot_freed = asyncio.Event()
        work = rt.subscribe_work()
        installed = self._install_signal_handlers(loop)
        backoff = ERROR_BACKOFF_INITIAL
        try:
            while not self._stop.is_set():
                free = self.concurrency - len(self._active)
                if free <= 0 or (self._active and free < self._claim_batch):
                    # Busy: wait until enough slots are free to make a claim worth a trip.
                    await self._wait_for(self._slot_freed, None)
                    continue
                work.clear()
                busy_before_claim = bool(self._active)
                try:
                    claimed = await rt.storage.claim_due_runs(
                        rt.environment,
                        self.queues,
                        free,
                        rt.attempts.lease_request(self.worker_id, self.lease),
                        rt.clock.now(),
                    )
                except Exception as error:
                    # Storage errors arrive as RunlaneError; anything else is a bug, but a
                    # worker that crash-loops helps nobody: log it and back off the same way.
                    logger.warning(
                        "worker %s: claim failed (%s); retrying in %.1fs",
                        self.worker_id,
                        error,
                        backoff,
                        exc_info=not isinstance(error, RunlaneError),
                    )
                    await self._wait_for(asyncio.Event(), backoff)
                    backoff = min(backoff * 2, ERROR_BACKOFF_MAX)
                    continue
                backoff = ERROR_BACKOFF_INITIAL
                for run in claimed:
                    task = loop.create_task(self._execute(run))
                    self._active.add(task)
                if claimed:
                    continue
                if self.mode is WorkerMode.DRAIN:
                    if not busy_before_claim and not self._active:
                        return
                    # Attempts that finished during the claim may have freed capacity
                    # the claim could not see yet: claim again before deciding.
                    if self._active:
                        await self._wait_for(self._slot_freed, None)
                    continue
                await self._wait_for(work, self.poll_interval, notify=True)
        finally:
            rt.unsubscribe_work(work)
            await self._finish_in_flight()
            for sig in installed:
                loop.remove_signal_handler(sig)

    async def _execute(self, run: Run) -> None:
        try:
            settled = await self._rt.attempts.execute(run, self.lease, stop=self._stop)
            self.executed += 1
            if self._on_progress is not None:
                self._on_progress(settled)
        except Exception:
            # The lease will expire and maintenance recovers the run; keep the worker alive.
            logger.exception(
                "worker %s: attempt of run %s could not be settled", self.worker_id, run.id
            )
        finally:
            task = asyncio.current_task()
            if task is not None:
                self._active.discard(task)
            if self._slot_freed is not None:
                self._slot_freed.set()

    async def _wait_for(
        self, event: asyncio.Event, limit: float | None, *, notify: bool = False
    ) -> None:
        """Wait for ``event``, a stop, ``limit`` seconds, or (idle) a storage notification."""
        waiters = {asyncio.ensure_future(self._stop.wait()), asyncio.ensure_future(event.wait())}
        storage = self._rt.storage
        notified: asyncio.Future[bool] | None = None
        if notify and limit is not None and isinstance(storage, WorkNotifier):
            notified = asyncio.ensure_future(storage.wait_for_work(self._rt.environment, limit))
            waiters.add(notified)
        loop = asyncio.get_running_loop()
        deadline = None if limit is None else loop.time() + limit
        try:
            while True:
                remaining = None if deadline is None else max(0.0, deadline - loop.time())
                done, _ = await asyncio.wait(
                    waiters, timeout=remaining, return_when=asyncio.FIRST_COMPLETED
                )
                if not done or done != {notified} or _announced(notified):
                    return
                # A notifier that gave up (connection lost) must not turn idling into a
                # busy loop: keep waiting on the rest until the poll interval is over.
                waiters.discard(notified)
                notified = None
        finally:
            for future in waiters:
                future.cancel()
            await asyncio.gather(*waiters, return_exceptions=True)
            event.clear()

    async def _finish_in_flight(self) -> None:
        if self._active:
            await asyncio.gather(*self._active, return_exceptions=True)

    def _install_signal_handlers(self, loop: asyncio.AbstractEventLoop) -> list[int]:
        if not self._handle_signals or threading.current_thread() is not threading.main_thread():
            return []
        installed: list[int] = []
        for sig in (os_signal.SIGINT, os_signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, self._stop.set, SignalReason.SHUTDOWN)
                installed.append(sig)
        return installed


def _announced(notified: asyncio.Future[bool] | None) -> bool:
    if notified is None or not notified.done() or notified.cancelled():
        return False
    return notified.exception() is None and bool(notified.result())
