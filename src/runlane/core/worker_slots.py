"""A worker's slots: the attempts it runs, the claimed runs waiting for a slot under
their lease (the claim-ahead buffer), and the settles that carry its next claims."""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from collections import deque
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from runlane.core.attempts import OpenAttempt, SettledSoon
from runlane.core.batching import ClaimRequest, TransitionBatcher
from runlane.core.lease_keeping import LeaseSettings
from runlane.model.transitions import Released
from runlane.types.records import QueuePolicy
from runlane.types.retry import DEFAULT_RETRY_POLICY
from runlane.types.runs import Run

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine

    from runlane.core.attempts import AttemptRunner
    from runlane.core.observing import Observers
    from runlane.core.queue_pauses import PausedQueues
    from runlane.core.store import StoreScope
    from runlane.model.context import Signal

logger = logging.getLogger("runlane.worker")

#: While attempts are running, the worker claims again once half of its slots
#: (at most this many) are free, so claims come in batches rather than one by one.
CLAIM_BATCH_DIVISOR = 2
MAX_CLAIM_BATCH_WAIT = 50
#: Claim-ahead: besides its slots, a worker may hold this many claimed runs per slot
#: (at most MAX_CLAIM_AHEAD) waiting for a slot under their lease, so short attempts
#: never wait for a storage round trip between them. The buffer is only filled as far
#: as the slots would empty it within CLAIM_AHEAD_HORIZON seconds, judged from how
#: long recent attempts held their slot: workers with slow tasks claim no more than
#: their slots and leave the rest to other workers.
CLAIM_AHEAD_PER_SLOT = 10
MAX_CLAIM_AHEAD = 400
CLAIM_AHEAD_HORIZON = 0.05
#: Weight of the newest attempt in the running mean of slot holding times.
HOLD_TIME_WEIGHT = 0.1


#: Whether tasks can start eagerly (Python 3.12+): decided once, not per attempt.
_EAGER_START = sys.version_info >= (3, 12)


def _eager(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether attempts start eagerly (Python 3.12+, no task factory of the app's):
    an attempt runs at once up to its first real wait, so a handler that never waits
    is done, and its outcome handed to the settle batch, without a turn of the loop
    for a task of its own."""
    return _EAGER_START and loop.get_task_factory() is None


def _eager_task(
    coro: Coroutine[Any, Any, None], loop: asyncio.AbstractEventLoop
) -> asyncio.Task[None]:
    """A task that has run its first step already (Python 3.12+)."""
    if sys.version_info >= (3, 12):
        return asyncio.Task(coro, loop=loop, eager_start=True)
    return loop.create_task(coro)


class WorkerSlots:
    """The part of :class:`~runlane.core.worker.Worker` that runs attempts in its slots
    and is the settle batcher's ``ClaimHook``; the worker supplies what is declared here."""

    _store: StoreScope
    _attempts: AttemptRunner
    _observers: Observers
    _stop: Signal
    _on_progress: Callable[[Run], None] | None
    #: What stands for each attempt until it is settled: its task, or the attempt
    #: itself once its outcome is handed to the batch of settles.
    _active: dict[tuple[str, int], asyncio.Future[None] | OpenAttempt]
    #: Resolved when an attempt leaves ``_active`` (while _finish_in_flight waits).
    _settles_waiter: asyncio.Future[None] | None = None
    _on_settled: SettledSoon
    _holding: set[tuple[str, int]]
    _reserved: int
    _slot_freed: asyncio.Event | None
    _buffer: deque[tuple[Run, float]]
    _buffer_filled: asyncio.Event | None
    #: True while _start_buffered is starting runs (see there).
    _starting_buffered: bool = False
    _hold_time: float | None
    _claim_batch: int
    _more_due: bool
    _settles: TransitionBatcher
    queues: list[QueuePolicy]
    _pauses: PausedQueues
    concurrency: int
    claim_ahead: int
    lease: LeaseSettings
    worker_id: str
    executed: int

    def _ahead(self) -> int:
        """How many claimed runs may wait for a slot now (see CLAIM_AHEAD_PER_SLOT)."""
        hold = self._hold_time
        if hold is None or not self.claim_ahead or self._stop.is_set():
            return 0  # nothing is known about the tasks yet: claim only for the slots
        if hold * self.claim_ahead <= self.concurrency * CLAIM_AHEAD_HORIZON:
            return self.claim_ahead
        return int(self.concurrency * CLAIM_AHEAD_HORIZON / hold)

    def _room(self) -> int:
        """How many runs a claim may take now: free slots and free places in the buffer."""
        room = self.concurrency + self._ahead()
        return room - len(self._holding) - len(self._buffer) - self._reserved

    def _claim_batch_for(self, capacity: int) -> int:
        return max(1, min(capacity // CLAIM_BATCH_DIVISOR, MAX_CLAIM_BATCH_WAIT))

    def _start(self, runs: list[Run]) -> None:
        """Start an attempt of each claimed run in a free slot; buffer the rest."""
        if not runs:
            return
        buffer = self._buffer
        concurrency, holding = self.concurrency, self._holding
        loop = asyncio.get_running_loop()
        for run in runs:
            if len(holding) < concurrency and not buffer:
                self._begin(run, loop)
            elif self._stop.is_set():
                self._release(run, loop)  # claimed while stopping: nothing will start it
            else:
                buffer.append((run, loop.time()))
        if buffer and self._buffer_filled is not None:
            self._buffer_filled.set()
        self._claim_batch = self._claim_batch_for(self.concurrency + self._ahead())
        if self._observers.hears_slots and not _eager(loop):
            self._observers.slots(len(holding), concurrency)

    def _begin(self, run: Run, loop: asyncio.AbstractEventLoop) -> None:
        key = (run.id, run.attempt)
        self._holding.add(key)
        # _eager(loop), inlined: this runs per attempt started.
        if _EAGER_START and loop.get_task_factory() is None:
            observers = self._observers
            if observers.hears_slots:
                # Told now: the attempt may end before _start would tell its count.
                observers.slots(len(self._holding), self.concurrency)
            task = _eager_task(self._execute(run, key), loop)
            # Finished already: _execute has left _active as it leaves it.
            if not task.done():
                self._active[key] = task
            return
        self._active[key] = loop.create_task(self._execute(run, key))

    def _start_buffered(self) -> None:
        """Move buffered runs into the slots that are free."""
        buffer, holding = self._buffer, self._holding
        # An attempt started eagerly may free its slot within this loop: the loop
        # below, already running, takes the next run rather than a nested one.
        if not buffer or self._stop.is_set() or self._starting_buffered:
            return
        loop = asyncio.get_running_loop()
        self._starting_buffered = True
        try:
            while buffer and len(holding) < self.concurrency:
                self._begin(buffer.popleft()[0], loop)
        finally:
            self._starting_buffered = False

    def _release(self, run: Run, loop: asyncio.AbstractEventLoop) -> None:
        """Give a claimed run that never started back to the queue, at once."""
        key = (run.id, run.attempt)
        self._active[key] = loop.create_task(self._give_back(run, key))

    def _release_buffered(self) -> None:
        buffer = self._buffer
        if buffer:
            loop = asyncio.get_running_loop()
            while buffer:
                self._release(buffer.popleft()[0], loop)

    async def _give_back(self, run: Run, key: tuple[str, int]) -> None:
        try:
            # Released, as an attempt stopped by a shutdown is: no retry is spent.
            await self._attempts.settle(
                run,
                Released(0.0, "worker shutdown"),
                DEFAULT_RETRY_POLICY,
                self._settles,
                project=False,
                started=False,
            )
        except Exception:
            # Its lease will expire and maintenance recovers the run.
            logger.exception(
                "worker %s: claimed run %s could not be released", self.worker_id, run.id
            )
        finally:
            self._active.pop(key, None)

    async def _keep_buffered_leases(self) -> None:
        """Renew the lease of every run that waited in the buffer for a heartbeat interval.

        Buffered runs usually start within CLAIM_AHEAD_HORIZON; this covers tasks that
        suddenly take longer, so a waiting run's lease never expires under it.
        """
        assert self._buffer_filled is not None
        loop = asyncio.get_running_loop()
        interval = self.lease.interval
        while True:
            if not self._buffer:
                self._buffer_filled.clear()
                await self._buffer_filled.wait()
                continue
            oldest = min(taken for _, taken in self._buffer)
            await asyncio.sleep(max(0.0, oldest + interval - loop.time()))
            now = loop.time()
            stale = [run for run, taken in self._buffer if taken + interval <= now]
            if not stale:
                continue
            kept = await asyncio.gather(*(self._renew(run) for run in stale))
            renewed = {run.id for run, ok in zip(stale, kept, strict=True) if ok}
            lost = {run.id for run, ok in zip(stale, kept, strict=True) if not ok}
            self._buffer = deque(
                (run, now if run.id in renewed else taken)
                for run, taken in self._buffer
                if run.id not in lost
            )

    async def _renew(self, run: Run) -> bool:
        """Extend a buffered run's lease; False once it is lost (nobody must start it)."""
        store = self._store
        assert run.lease is not None
        try:
            status = await store.storage.heartbeat(
                store.environment,
                run.id,
                run.lease.token,
                store.now() + timedelta(seconds=self.lease.duration),
                store.now(),
            )
        except Exception as error:
            logger.warning(
                "worker %s: renewing the lease of run %s failed: %s", self.worker_id, run.id, error
            )
            return True  # not known to be lost: the next interval tries again
        return status is not None

    async def _execute(self, run: Run, key: tuple[str, int]) -> None:
        began = time.monotonic()
        on_progress = self._on_progress
        handed = False
        try:
            try:
                # The settled run is built only for on_progress.
                attempt = self._attempts.begin(
                    run,
                    self.lease,
                    stop=self._stop,
                    batcher=self._settles,
                    project=on_progress is not None,
                )
                await attempt.call()
            finally:
                # The handler is done (or raised): its slot frees before the settle is
                # written, which may wait for a batch.
                self._free_slot(key, time.monotonic() - began)
            # Usually the outcome goes to the batch and this task ends here: nothing
            # waits for the write. The attempt stands in _active until the batch's flush
            # has done the rest (_settled_soon); _finish_in_flight waits for that.
            if attempt.settle_soon(self._on_settled):
                self._active[key] = attempt
                handed = True
                return
            self._count(await attempt.settle())
        except Exception as error:
            self._unsettled(run.id, error)
        finally:
            if not handed:
                self._settle_done(key)

    def _settled_soon(
        self, attempt: OpenAttempt, settled: Run | None, error: BaseException | None
    ) -> None:
        """The batch holding an attempt's outcome was written (or failed); the attempt
        leaves ``_active`` either way, unless a task settling it late takes its place."""
        run = attempt.report.run
        key = (run.id, run.attempt)
        try:
            if error is not None:
                self._unsettled(run.id, error)
            elif settled is None:
                # A concurrent change won the compare-and-set: settle() re-reads the run
                # and decides, in a task that takes the attempt's place.
                task = asyncio.get_running_loop().create_task(self._settle_late(key, attempt))
                self._active[key] = task
                return
            else:
                self._count(settled)
        finally:
            if self._active.get(key) is attempt:
                self._settle_done(key)

    async def _settle_late(self, key: tuple[str, int], attempt: OpenAttempt) -> None:
        try:
            self._count(await attempt.settle())
        except Exception as error:
            self._unsettled(key[0], error)
        finally:
            self._settle_done(key)

    def _unsettled(self, run_id: str, error: BaseException) -> None:
        # The lease will expire and maintenance recovers the run; keep the worker alive.
        logger.error(
            "worker %s: attempt of run %s could not be settled",
            self.worker_id,
            run_id,
            exc_info=error,
        )

    def _count(self, settled: Run) -> None:
        self.executed += 1
        if self._on_progress is not None:
            self._on_progress(settled)

    def _settle_done(self, key: tuple[str, int]) -> None:
        self._active.pop(key, None)
        if self._slot_freed is not None:
            self._slot_freed.set()
        waiter = self._settles_waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _free_slot(self, key: tuple[str, int], held: float) -> None:
        """Give back the slot of an attempt whose handler held it for ``held`` seconds."""
        hold = self._hold_time
        self._hold_time = held if hold is None else hold + HOLD_TIME_WEIGHT * (held - hold)
        self._holding.discard(key)
        self._start_buffered()
        if self._slot_freed is not None:
            self._slot_freed.set()
        observers = self._observers
        if observers.hears_slots:
            observers.slots(len(self._holding), self.concurrency)

    # -- claiming while settling (the batcher's ClaimHook) ---------------------------

    def claim_request(self, settling: int) -> ClaimRequest | None:
        """Claim with a flush of settles while runs are due and enough slots are free."""
        if not self._more_due or self._stop.is_set():
            return None
        free = self._room()
        if free < self._claim_batch:
            return None
        queues = self._pauses.claimable(self.queues)
        if not queues:
            return None
        # About as many as are settled: the next flush claims for the next batch.
        limit = min(free, max(settling, self._claim_batch))
        self._reserved += limit
        lease = self._attempts.lease_request(self.worker_id, self.lease)
        return ClaimRequest(queues, limit, lease)

    def claimed(self, runs: list[Run], request: ClaimRequest) -> None:
        """Start the runs claimed with a flush of settles."""
        self._reserved -= request.limit
        self._more_due = len(runs) >= request.limit
        self._start(runs)

    def flushed(self) -> None:
        """Let the loop look again: it claims itself once settles stop carrying claims."""
        if self._slot_freed is not None:
            self._slot_freed.set()
