"""Workers: local slots that claim due runs in batches and execute them."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal as os_signal
import threading
from collections.abc import Awaitable, Callable, Sequence
from enum import StrEnum
from typing import TYPE_CHECKING

from runlane.core.batching import ClaimRequest, TransitionBatcher
from runlane.core.context import Signal, SignalReason
from runlane.core.errors import RunlaneError, configuration_error
from runlane.core.execution import LeaseSettings
from runlane.core.maintenance import maintain_while_leading
from runlane.storage.protocol import WorkNotifier
from runlane.types.records import QueuePolicy
from runlane.types.runs import Run

if TYPE_CHECKING:
    from runlane.core.execution import AttemptRunner
    from runlane.core.observing import Observers
    from runlane.core.store import StoreScope
    from runlane.types.runs import TickReport

logger = logging.getLogger("runlane.worker")

#: After a storage error the worker waits this long, doubling up to the maximum.
ERROR_BACKOFF_INITIAL = 0.5
ERROR_BACKOFF_MAX = 30.0
#: While attempts are running, the worker claims again once half of its slots
#: (at most this many) are free, so claims come in batches rather than one by one.
CLAIM_BATCH_DIVISOR = 2
MAX_CLAIM_BATCH_WAIT = 50
#: Settles that carry a claim go at most this share of the slots per write, and
#: this many such writes may be in flight: storage writes one batch (settles and
#: the claim riding on them) while the worker runs another.
SETTLE_BATCH_DIVISOR = 2
MAX_SETTLE_FLUSHES = 2


class WorkerMode(StrEnum):
    """``POLL`` runs until stopped; ``DRAIN`` returns once no due work is left."""

    POLL = "poll"
    DRAIN = "drain"


class WorkBell:
    """Wakes this process's idle workers whenever it creates runnable work."""

    __slots__ = ("_events",)

    def __init__(self) -> None:
        self._events: list[asyncio.Event] = []

    def subscribe(self) -> asyncio.Event:
        """An event set at every :meth:`ring` until unsubscribed."""
        event = asyncio.Event()
        self._events.append(event)
        return event

    def unsubscribe(self, event: asyncio.Event) -> None:
        """Stop setting ``event``."""
        if event in self._events:
            self._events.remove(event)

    def ring(self) -> None:
        """Runnable work was just created here."""
        for event in self._events:
            event.set()


class Worker:
    """Claims due runs within ``concurrency`` local slots. Build it with ``rl.worker(...)``.

    It claims and heartbeats through ``store``, executes through ``attempts``, wakes
    on ``work``, connects with ``connect`` before its first claim and runs ``tick`` as
    the maintenance pass while it leads maintenance.
    """

    def __init__(
        self,
        store: StoreScope,
        attempts: AttemptRunner,
        observers: Observers,
        *,
        connect: Callable[[], Awaitable[None]],
        tick: Callable[[], Awaitable[TickReport]],
        work: WorkBell,
        queues: Sequence[QueuePolicy],
        concurrency: int,
        mode: WorkerMode,
        lease: LeaseSettings,
        worker_id: str,
        poll_interval: float,
        handle_signals: bool,
        on_progress: Callable[[Run], None] | None,
        maintenance_interval: float | None = None,
    ) -> None:
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise configuration_error("worker concurrency must be a whole number of at least 1.")
        if not queues:
            raise configuration_error("the worker has no queues to claim from.")
        self._store = store
        self._attempts = attempts
        self._observers = observers
        self._connect = connect
        self._tick = tick
        self._work = work
        self.queues = list(queues)
        self.concurrency = concurrency
        self.mode = mode
        self.lease = lease
        self.worker_id = worker_id
        self.poll_interval = poll_interval
        self._handle_signals = handle_signals
        self._on_progress = on_progress
        #: Seconds between maintenance passes while this worker leads them; None: never.
        self.maintenance_interval = maintenance_interval
        self._stop = Signal()
        #: Attempt tasks until their outcome is written, by (run id, attempt).
        self._active: dict[tuple[str, int], asyncio.Task[None]] = {}
        #: Attempts holding a slot, by (run id, attempt): from claim until the handler is
        #: done (its outcome is then written, with no handler running any more).
        self._holding: set[tuple[str, int]] = set()
        #: Slots promised to claims in flight (the loop's own, or ones riding on settles).
        self._reserved = 0
        self._slot_freed: asyncio.Event | None = None
        self._claim_batch = max(1, min(concurrency // CLAIM_BATCH_DIVISOR, MAX_CLAIM_BATCH_WAIT))
        #: Whether the last claim got all it asked for (so more runs are probably due).
        self._more_due = False
        self._settles = TransitionBatcher(
            store,
            max_batch=max(1, concurrency // SETTLE_BATCH_DIVISOR),
            max_flushes=MAX_SETTLE_FLUSHES,
            claims=self,
        )
        self.executed = 0

    async def stop(self) -> None:
        """Stop claiming; in-flight attempts are told to stop (SHUTDOWN) and finish."""
        self._stop.set(SignalReason.SHUTDOWN)

    @property
    def stopping(self) -> bool:
        """Whether :meth:`stop` was called (or a signal arrived)."""
        return self._stop.is_set()

    async def run(self) -> None:
        """Claim and execute until stopped (POLL) or until no due work is left (DRAIN).

        A polling worker with a ``maintenance_interval`` also contends for the
        environment's maintenance lead and runs the maintenance passes while it has it.
        """
        store, attempts, observers = self._store, self._attempts, self._observers
        await self._connect()
        loop = asyncio.get_running_loop()
        self._slot_freed = asyncio.Event()
        work = self._work.subscribe()
        installed = self._install_signal_handlers(loop)
        maintaining = self._start_maintenance(loop)
        backoff = ERROR_BACKOFF_INITIAL
        logger.info(
            "worker %s started: queues %s, concurrency %s, %s",
            self.worker_id,
            ", ".join(q.name for q in self.queues),
            self.concurrency,
            self.mode.value,
            extra={"event": "worker.started", "worker_id": self.worker_id},
        )
        if observers:
            observers.slots(0, self.concurrency)
        try:
            while not self._stop.is_set():
                free = self.concurrency - len(self._holding) - self._reserved
                if (
                    free <= 0
                    or (self._holding and free < self._claim_batch)
                    or (self._more_due and not self._settles.idle)
                ):
                    # Busy: wait until enough slots are free to make a claim worth a trip
                    # (while runs are due and settles are being written, they claim).
                    await self._wait_for(self._slot_freed, None)
                    continue
                work.clear()
                busy_before_claim = bool(self._active)
                self._reserved += free
                try:
                    claimed = await store.storage.claim_due_runs(
                        store.environment,
                        self.queues,
                        free,
                        attempts.lease_request(self.worker_id, self.lease),
                        store.now(),
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
                finally:
                    self._reserved -= free
                backoff = ERROR_BACKOFF_INITIAL
                self._more_due = len(claimed) >= free
                self._start(claimed)
                if claimed:
                    # Let the attempts just started begin before claiming more.
                    await asyncio.sleep(0)
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
            self._work.unsubscribe(work)
            if maintaining is not None:
                # Stopped: the pass under way finishes; otherwise (an error) it is cancelled.
                if not self._stop.is_set():
                    maintaining.cancel()
                await asyncio.gather(maintaining, return_exceptions=True)
            await self._finish_in_flight()
            for sig in installed:
                loop.remove_signal_handler(sig)
            logger.info(
                "worker %s stopped after %s attempts",
                self.worker_id,
                self.executed,
                extra={"event": "worker.stopped", "worker_id": self.worker_id},
            )

    def _start_maintenance(self, loop: asyncio.AbstractEventLoop) -> asyncio.Task[None] | None:
        if self.mode is not WorkerMode.POLL or self.maintenance_interval is None:
            return None
        return loop.create_task(
            maintain_while_leading(
                self._store, self._tick, self.worker_id, self.maintenance_interval, self._stop
            )
        )

    def _start(self, runs: list[Run]) -> None:
        """Start an attempt of each claimed run in a slot of its own."""
        create_task = asyncio.get_running_loop().create_task
        holding, active = self._holding, self._active
        for run in runs:
            key = (run.id, run.attempt)
            holding.add(key)
            active[key] = create_task(self._execute(run, key))
        if runs and self._observers:
            self._observers.slots(len(holding), self.concurrency)

    async def _execute(self, run: Run, key: tuple[str, int]) -> None:
        attempts = self._attempts

        def handler_done() -> None:
            self._holding.discard(key)
            if self._slot_freed is not None:
                self._slot_freed.set()
            if observers:
                observers.slots(len(self._holding), self.concurrency)

        observers = self._observers
        on_progress = self._on_progress
        try:
            try:
                # The settled run is built only for on_progress and observers.
                settled = await attempts.execute(
                    run,
                    self.lease,
                    stop=self._stop,
                    batcher=self._settles,
                    project=on_progress is not None,
                    handler_done=handler_done,
                )
            finally:
                if key in self._holding:
                    handler_done()  # the attempt raised before its handler was done
            self.executed += 1
            if on_progress is not None:
                on_progress(settled)
        except Exception:
            # The lease will expire and maintenance recovers the run; keep the worker alive.
            logger.exception(
                "worker %s: attempt of run %s could not be settled", self.worker_id, run.id
            )
        finally:
            self._active.pop(key, None)
            if self._slot_freed is not None:
                self._slot_freed.set()

    # -- claiming while settling (the batcher's ClaimHook) ---------------------------

    def claim_request(self, settling: int) -> ClaimRequest | None:
        """Claim with a flush of settles while runs are due and enough slots are free."""
        if not self._more_due or self._stop.is_set():
            return None
        free = self.concurrency - len(self._holding) - self._reserved
        if free < self._claim_batch:
            return None
        # About as many as are settled: the next flush claims for the next batch.
        limit = min(free, max(settling, self._claim_batch))
        self._reserved += limit
        lease = self._attempts.lease_request(self.worker_id, self.lease)
        return ClaimRequest(self.queues, limit, lease)

    def claimed(self, runs: list[Run], request: ClaimRequest) -> None:
        """Start the runs claimed with a flush of settles."""
        self._reserved -= request.limit
        self._more_due = len(runs) >= request.limit
        self._start(runs)

    def flushed(self) -> None:
        """Let the loop look again: it claims itself once settles stop carrying claims."""
        if self._slot_freed is not None:
            self._slot_freed.set()

    async def _wait_for(
        self, event: asyncio.Event, limit: float | None, *, notify: bool = False
    ) -> None:
        """Wait for ``event``, a stop, ``limit`` seconds, or (idle) a storage notification."""
        waiters = {asyncio.ensure_future(self._stop.wait()), asyncio.ensure_future(event.wait())}
        storage = self._store.storage
        notified: asyncio.Future[bool] | None = None
        if notify and limit is not None and isinstance(storage, WorkNotifier):
            notified = asyncio.ensure_future(storage.wait_for_work(self._store.environment, limit))
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
        # Settles of finishing attempts may still start runs they claimed: wait for those too.
        while self._active:
            await asyncio.gather(*self._active.values(), return_exceptions=True)

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
