"""Workers: local slots that claim due runs in batches and execute them."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import signal as os_signal
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from runlane.core.batching import ClaimRequest, TransitionBatcher
from runlane.core.execution import LeaseSettings, OpenAttempt
from runlane.core.maintenance import maintain_while_leading
from runlane.model.context import Signal, SignalReason
from runlane.model.transitions import Released
from runlane.ports.storage import HandsOff, Standby, WorkNotifier
from runlane.types.errors import RunlaneError, configuration_error
from runlane.types.records import QueuePolicy
from runlane.types.retry import DEFAULT_RETRY_POLICY
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
    the maintenance pass while it leads maintenance. With ``hand_offs``, an idle
    worker stands by so lone triggers may hand it runs (see ``HandsOff``).
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
        claim_ahead: int | None = None,
        hand_offs: bool = True,
    ) -> None:
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise configuration_error("worker concurrency must be a whole number of at least 1.")
        if claim_ahead is None:
            claim_ahead = min(concurrency * CLAIM_AHEAD_PER_SLOT, MAX_CLAIM_AHEAD)
        elif isinstance(claim_ahead, bool) or not isinstance(claim_ahead, int) or claim_ahead < 0:
            raise configuration_error("worker claim_ahead must be a whole number of at least 0.")
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
        #: Whether to stand by for hand-offs when idle (storage permitting). A lane with
        #: a transport wakes workers through it, and its triggers never hand off.
        self.hand_offs = hand_offs
        self._stop = Signal()
        #: Attempts until their outcome is written, by (run id, attempt): the attempt's
        #: task, or once it handed its outcome to a batch, a future the flush resolves.
        self._active: dict[tuple[str, int], asyncio.Future[None]] = {}
        #: Attempts holding a slot, by (run id, attempt): from claim until the handler is
        #: done (its outcome is then written, with no handler running any more).
        self._holding: set[tuple[str, int]] = set()
        #: Slots promised to claims in flight (the loop's own, or ones riding on settles).
        self._reserved = 0
        self._slot_freed: asyncio.Event | None = None
        #: Most claimed runs waiting for a slot (see CLAIM_AHEAD_PER_SLOT).
        self.claim_ahead = claim_ahead
        #: Claimed runs waiting for a slot, oldest first, each with the loop time its
        #: lease was last taken or renewed.
        self._buffer: deque[tuple[Run, float]] = deque()
        self._buffer_filled: asyncio.Event | None = None
        #: Running mean of how long attempts hold a slot (None until one is done).
        self._hold_time: float | None = None
        self._claim_batch = self._claim_batch_for(concurrency)
        #: Whether the last claim got all it asked for (so more runs are probably due).
        self._more_due = False
        self._settles = TransitionBatcher(
            store,
            max_batch=max(1, (concurrency + claim_ahead) // SETTLE_BATCH_DIVISOR),
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
        self._buffer_filled = asyncio.Event()
        work = self._work.subscribe()
        installed = self._install_signal_handlers(loop)
        maintaining = self._start_maintenance(loop)
        renewing = loop.create_task(self._keep_buffered_leases()) if self.claim_ahead else None
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
                free = self._room()
                if (
                    free <= 0
                    or (self._holding and free < self._claim_batch)
                    or (self._more_due and not self._settles.idle)
                ):
                    # Busy: wait until enough slots (or places in the buffer) are free to
                    # make a claim worth a trip (while runs are due and settles are being
                    # written, they claim).
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
                await self._idle(work)
        finally:
            self._work.unsubscribe(work)
            if renewing is not None:
                renewing.cancel()
                await asyncio.gather(renewing, return_exceptions=True)
            # Runs claimed ahead never started: give them back before anything else.
            self._release_buffered()
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

    # -- idling: standing by for hand-offs ---------------------------------------------

    async def _idle(self, work: asyncio.Event) -> None:
        """Wait for work, a notification or the poll interval, standing by meanwhile
        (when storage hands off) so a lone trigger may hand a due run straight here."""
        offer = await self._stand_by()
        try:
            await self._wait_for(work, self.poll_interval, notify=True, offer=offer)
        finally:
            if offer is not None:
                await self._stand_down(offer)

    async def _stand_by(self) -> Standby | None:
        storage = self._store.storage
        if not self.hand_offs or not isinstance(storage, HandsOff) or self._stop.is_set():
            return None
        slots = self.concurrency - len(self._holding) - len(self._buffer)
        # Bounded queues are claimed within their capacity, never handed off.
        queues = list(dict.fromkeys(q.name for q in self.queues if q.concurrency_limit is None))
        if slots < 1 or not queues:
            return None
        try:
            return await storage.stand_by(
                self._store.environment,
                self.worker_id,
                queues,
                slots,
                self.lease.duration,
                self._start,
            )
        except Exception as error:
            # Nothing was offered: the worker waits and claims as it would without.
            logger.warning("worker %s: standing by failed (%s)", self.worker_id, error)
            return None

    async def _stand_down(self, offer: Standby) -> None:
        """Withdraw ``offer`` and start the runs handed to it, trying until it is withdrawn
        (an offer left standing keeps taking runs nobody starts) or the worker stops."""
        storage = self._store.storage
        assert isinstance(storage, HandsOff)
        backoff = ERROR_BACKOFF_INITIAL
        while True:
            try:
                runs = await storage.stand_down(self._store.environment, offer)
            except Exception as error:
                if self._stop.is_set():
                    # Runs handed over are recovered when their leases expire.
                    logger.warning(
                        "worker %s: withdrawing its offer failed (%s); stopping anyway",
                        self.worker_id,
                        error,
                    )
                    return
                logger.warning(
                    "worker %s: withdrawing its offer failed (%s); retrying in %.1fs",
                    self.worker_id,
                    error,
                    backoff,
                )
                await self._wait_for(asyncio.Event(), backoff)
                backoff = min(backoff * 2, ERROR_BACKOFF_MAX)
                continue
            self._start(runs)
            return

    def _start_maintenance(self, loop: asyncio.AbstractEventLoop) -> asyncio.Task[None] | None:
        if self.mode is not WorkerMode.POLL or self.maintenance_interval is None:
            return None
        return loop.create_task(
            maintain_while_leading(
                self._store, self._tick, self.worker_id, self.maintenance_interval, self._stop
            )
        )

    # -- slots and the claim-ahead buffer --------------------------------------------

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
        if self._observers:
            self._observers.slots(len(holding), concurrency)

    def _begin(self, run: Run, loop: asyncio.AbstractEventLoop) -> None:
        key = (run.id, run.attempt)
        self._holding.add(key)
        self._active[key] = loop.create_task(self._execute(run, key))

    def _start_buffered(self) -> None:
        """Move buffered runs into the slots that are free."""
        buffer, holding = self._buffer, self._holding
        if not buffer or self._stop.is_set():
            return
        loop = asyncio.get_running_loop()
        while buffer and len(holding) < self.concurrency:
            self._begin(buffer.popleft()[0], loop)

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
            # waits for the write but a future that _finish_in_flight (and a draining
            # worker) can wait on. The batch's flush does the rest (_settled_soon).
            if attempt.settle_soon(functools.partial(self._settled_soon, key, attempt)):
                self._active[key] = asyncio.get_running_loop().create_future()
                handed = True
                return
            self._count(await attempt.settle())
        except Exception as error:
            self._unsettled(run.id, error)
        finally:
            if not handed:
                self._settle_done(key)

    def _settled_soon(
        self,
        key: tuple[str, int],
        attempt: OpenAttempt,
        settled: Run | None,
        error: BaseException | None,
    ) -> None:
        """The batch holding an attempt's outcome was written (or failed); the future
        standing for the attempt in ``_active`` is resolved either way."""
        waiter = self._active[key]
        try:
            if error is not None:
                self._unsettled(key[0], error)
            elif settled is None:
                # A concurrent change won the compare-and-set: settle() re-reads the run
                # and decides, in a task that takes the waiter's place.
                task = asyncio.get_running_loop().create_task(self._settle_late(key, attempt))
                self._active[key] = task
                return
            else:
                self._count(settled)
        finally:
            waiter.set_result(None)
            if self._active.get(key) is waiter:
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

    def _free_slot(self, key: tuple[str, int], held: float) -> None:
        """Give back the slot of an attempt whose handler held it for ``held`` seconds."""
        hold = self._hold_time
        self._hold_time = held if hold is None else hold + HOLD_TIME_WEIGHT * (held - hold)
        self._holding.discard(key)
        self._start_buffered()
        if self._slot_freed is not None:
            self._slot_freed.set()
        observers = self._observers
        if observers:
            observers.slots(len(self._holding), self.concurrency)

    # -- claiming while settling (the batcher's ClaimHook) ---------------------------

    def claim_request(self, settling: int) -> ClaimRequest | None:
        """Claim with a flush of settles while runs are due and enough slots are free."""
        if not self._more_due or self._stop.is_set():
            return None
        free = self._room()
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
        self,
        event: asyncio.Event,
        limit: float | None,
        *,
        notify: bool = False,
        offer: Standby | None = None,
    ) -> None:
        """Wait for ``event``, a stop, ``limit`` seconds, or (idle) a storage notification
        or a hand-off to ``offer``."""
        waiters = {asyncio.ensure_future(self._stop.wait()), asyncio.ensure_future(event.wait())}
        if offer is not None:
            waiters.add(asyncio.ensure_future(offer.arrived.wait()))
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
            # Cancelled, not awaited: the claim that follows a wakeup need not wait the
            # two loop iterations their ending takes (they hold nothing to clean up).
            for future in waiters:
                if future.done():
                    _retrieve(future)
                else:
                    future.cancel()
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


def _retrieve(future: asyncio.Future[Any]) -> None:
    """Mark a finished waiter's outcome seen, so a failed one is not reported as an
    exception nobody retrieved (what it raised is the notifier's to log)."""
    if not future.cancelled():
        future.exception()


def _announced(notified: asyncio.Future[bool] | None) -> bool:
    if notified is None or not notified.done() or notified.cancelled():
        return False
    return notified.exception() is None and bool(notified.result())
