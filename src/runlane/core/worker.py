"""Workers: local slots that claim due runs in batches and execute them."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal as os_signal
import threading
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from enum import StrEnum
from typing import TYPE_CHECKING

from runlane.core.backoff import ErrorBackoff, connect_when_reachable
from runlane.core.lease_keeping import LeaseSettings
from runlane.core.maintenance import maintain_while_leading
from runlane.core.worker_idling import WorkerIdling
from runlane.core.worker_slots import CLAIM_AHEAD_PER_SLOT, MAX_CLAIM_AHEAD, WorkerSlots
from runlane.model.context import Signal, SignalReason
from runlane.ports.storage import AnnouncesPauses
from runlane.types.errors import RunlaneError, configuration_error
from runlane.types.records import QueuePolicy
from runlane.types.runs import Run

if TYPE_CHECKING:
    from runlane.core.attempts import AttemptRunner, OpenAttempt
    from runlane.core.observing import Observers
    from runlane.core.queue_pauses import PausedQueues
    from runlane.core.store import StoreScope
    from runlane.types.runs import TickReport

logger = logging.getLogger("runlane.worker")

#: Settles that carry a claim go at most this share of the slots per write, and
#: this many such writes may be in flight: storage writes one batch (settles and
#: the claim riding on them) while the worker runs another.
SETTLE_BATCH_DIVISOR = 2
MAX_SETTLE_FLUSHES = 2
#: Shortest idle wait of a worker pacing a rate-limited queue's backlog (seconds): a
#: faster queue takes several tokens per claim (its burst) rather than a claim per token.
MIN_TOKEN_WAIT = 0.01


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


class Worker(WorkerSlots, WorkerIdling):
    """Claims due runs within ``concurrency`` local slots. Build it with ``rl.worker(...)``.

    It claims and heartbeats through ``store``, executes through ``attempts``, wakes
    on ``work``, connects with ``connect`` before its first claim and runs ``tick`` as
    the maintenance pass while it leads maintenance. With ``hand_offs``, an idle
    worker stands by so lone triggers may hand it runs (see ``HandsOff``).

    This module holds its loop and its lifecycle (start, drain, stop);
    :mod:`.worker_slots` the attempts in its slots and the claim-ahead buffer, and
    :mod:`.worker_idling` its waiting while idle.
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
        pauses: PausedQueues,
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
        #: The paused queues (read again every poll interval): claims leave them out.
        self._pauses = pauses
        #: The shortest interval between two tokens of the rate-limited queues it serves
        #: (None: it serves none), and their names.
        intervals = [q.rate_limit.per / q.rate_limit.count for q in queues if q.rate_limit]
        self._token_interval = max(MIN_TOKEN_WAIT, min(intervals)) if intervals else None
        self._rate_limited = frozenset(q.name for q in queues if q.rate_limit)
        self._rated_policies = [q for q in queues if q.rate_limit]
        #: Until when (loop time) idle waits last one token interval: a rate-limited
        #: queue started runs lately, so its backlog may get a token any moment.
        self._paced_until = 0.0
        #: A driver that hears pauses and resumes of other processes, and the version of
        #: its announcements this worker last read the pauses at.
        storage = store.storage
        self._announcer = storage if isinstance(storage, AnnouncesPauses) else None
        self._pauses_seen: object = None
        #: Set when an idle wait ended on a storage notification (WorkerIdling).
        self._woken = False
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
        #: task, or once it handed its outcome to a batch, the attempt itself.
        self._active: dict[tuple[str, int], asyncio.Future[None] | OpenAttempt] = {}
        #: What every handed settle tells when written (bound once, not per attempt).
        self._on_settled = self._settled_soon
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
        self._settles = attempts.settle_batcher(
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
        # Started during a database restart or outage, it waits for the server.
        if not await connect_when_reachable(
            self._connect, self._stop, f"worker {self.worker_id}", logger
        ):
            return
        loop = asyncio.get_running_loop()
        self._slot_freed = asyncio.Event()
        self._buffer_filled = asyncio.Event()
        work = self._work.subscribe()
        installed = self._install_signal_handlers(loop)
        maintaining = self._start_maintenance(loop)
        renewing = loop.create_task(self._keep_buffered_leases()) if self.claim_ahead else None
        await self._listen_for_pauses()
        await self._read_pauses()
        watching = loop.create_task(self._watch_pauses())
        #: Set while claims fail in a row (None, a plain store, on the hot path otherwise).
        backoff: ErrorBackoff | None = None
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
                # Inline, not a coroutine: this runs before every claim.
                announcer = self._announcer
                if announcer is not None:
                    seen = announcer.pauses_version(store.environment)
                    if seen != self._pauses_seen:
                        # Another process paused or resumed a queue: read them now.
                        self._pauses_seen = seen
                        await self._read_pauses()
                elif self._woken:
                    self._woken = False
                    if self._pauses.names:
                        # Woken by a commit while some queues are paused: maybe a
                        # resume (SQLite claims leave out queues paused since).
                        await self._read_pauses()
                queues = self._pauses.claimable(self.queues)
                self._reserved += free
                try:
                    claimed = (
                        await store.storage.claim_due_runs(
                            store.environment,
                            queues,
                            free,
                            attempts.lease_request(self.worker_id, self.lease),
                            store.now(),
                        )
                        if queues
                        else []
                    )
                except Exception as error:
                    # Storage errors arrive as RunlaneError; anything else is a bug, but a
                    # worker that crash-loops helps nobody: log it and back off the same way.
                    if backoff is None:
                        backoff = ErrorBackoff()
                    delay = backoff.next_delay()
                    logger.warning(
                        "worker %s: claim failed (%s); retrying in %.1fs",
                        self.worker_id,
                        error,
                        delay,
                        exc_info=not isinstance(error, RunlaneError),
                    )
                    await self._wait_for(asyncio.Event(), delay)
                    continue
                finally:
                    self._reserved -= free
                backoff = None
                if self._token_interval is not None and claimed:
                    self._note_rate_limited_starts(claimed, loop.time())
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
                limit = self.poll_interval
                if self._token_interval is not None and loop.time() < self._paced_until:
                    limit = await self._until_next_token()
                await self._idle(work, limit)
        finally:
            self._work.unsubscribe(work)
            watching.cancel()
            await asyncio.gather(watching, return_exceptions=True)
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

    def _note_rate_limited_starts(self, claimed: list[Run], now: float) -> None:
        if any(run.queue in self._rate_limited for run in claimed):
            self._paced_until = now + self.poll_interval

    async def _until_next_token(self) -> float:
        """An idle wait while a rate-limited queue started runs within the last poll
        interval (else the worker waits a poll interval): until its next token, at most
        a token interval, so its backlog takes each token as it comes (a token taken
        late is time lost for good). Once its claims find nothing for a poll interval,
        the worker polls as usual again."""
        assert self._token_interval is not None
        wait = min(self.poll_interval, self._token_interval)
        store = self._store
        try:
            at = await store.storage.next_rate_token(
                store.environment, self._rated_policies, store.now()
            )
        except Exception as error:
            # The claims report storage trouble themselves: wait a token interval.
            logger.debug("worker %s: reading the next token failed (%s)", self.worker_id, error)
            return wait
        if at is not None:
            ahead = (at - store.now()).total_seconds()
            if ahead > 0:
                wait = min(wait, ahead)
        return wait

    async def _listen_for_pauses(self) -> None:
        announcer = self._announcer
        if announcer is None:
            return
        try:
            await announcer.listen_for_pauses(self._store.environment, self.poll_interval)
        except Exception as error:
            # Reading the pauses every poll interval still covers them.
            logger.warning("worker %s: listening for pauses failed (%s)", self.worker_id, error)
        self._pauses_seen = announcer.pauses_version(self._store.environment)

    async def _watch_pauses(self) -> None:
        """Read the paused queues again every poll interval, so a pause stored by any
        process stops this worker's claims within one interval."""
        while True:
            await asyncio.sleep(self.poll_interval)
            await self._read_pauses()

    async def _read_pauses(self) -> None:
        try:
            await self._pauses.refresh()
        except Exception as error:
            # The last set read stays; the claims report storage trouble themselves.
            logger.warning(
                "worker %s: reading the paused queues failed (%s)", self.worker_id, error
            )

    def _start_maintenance(self, loop: asyncio.AbstractEventLoop) -> asyncio.Task[None] | None:
        if self.mode is not WorkerMode.POLL or self.maintenance_interval is None:
            return None
        return loop.create_task(
            maintain_while_leading(
                self._store, self._tick, self.worker_id, self.maintenance_interval, self._stop
            )
        )

    async def _finish_in_flight(self) -> None:
        # Settles of finishing attempts may still start runs they claimed: wait for those too.
        while self._active:
            tasks = [entry for entry in self._active.values() if isinstance(entry, asyncio.Future)]
            if tasks:
                await asyncio.gather(*tasks, return_exceptions=True)
                continue
            # Only outcomes handed to the batch are left: each leaves once its flush ends.
            self._settles_waiter = waiter = asyncio.get_running_loop().create_future()
            try:
                await waiter
            finally:
                self._settles_waiter = None

    def _install_signal_handlers(self, loop: asyncio.AbstractEventLoop) -> list[int]:
        if not self._handle_signals or threading.current_thread() is not threading.main_thread():
            return []
        installed: list[int] = []
        for sig in (os_signal.SIGINT, os_signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, self._stop.set, SignalReason.SHUTDOWN)
                installed.append(sig)
        return installed
