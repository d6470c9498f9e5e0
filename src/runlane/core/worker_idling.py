"""A worker's idling: waiting for work, a notification or its poll interval, and
standing by meanwhile so a lone trigger may hand a due run straight to it."""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import TYPE_CHECKING, Any

from runlane.core.backoff import ErrorBackoff
from runlane.ports.storage import HandsOff, Standby, WorkNotifier

if TYPE_CHECKING:
    from runlane.core.lease_keeping import LeaseSettings
    from runlane.core.queue_pauses import PausedQueues
    from runlane.core.store import StoreScope
    from runlane.model.context import Signal
    from runlane.types.records import QueuePolicy
    from runlane.types.runs import Run

logger = logging.getLogger("runlane.worker")


class WorkerIdling:
    """The part of :class:`~runlane.core.worker.Worker` that waits while it has nothing
    to claim; the worker supplies what is declared here."""

    _store: StoreScope
    _stop: Signal
    _holding: set[tuple[str, int]]
    _buffer: deque[tuple[Run, float]]
    queues: list[QueuePolicy]
    _pauses: PausedQueues
    concurrency: int
    lease: LeaseSettings
    worker_id: str
    poll_interval: float
    hand_offs: bool
    _woken: bool

    if TYPE_CHECKING:

        def _start(self, runs: list[Run]) -> None: ...

    async def _idle(self, work: asyncio.Event, limit: float) -> None:
        """Wait for work, a notification or ``limit`` seconds (the poll interval, or a
        token interval while a rate-limited queue has a backlog), standing by meanwhile
        (when storage hands off) so a lone trigger may hand a due run straight here."""
        offer = await self._stand_by()
        try:
            await self._wait_for(work, limit, notify=True, offer=offer)
        finally:
            if offer is not None:
                await self._stand_down(offer)

    async def _stand_by(self) -> Standby | None:
        storage = self._store.storage
        if not self.hand_offs or not isinstance(storage, HandsOff) or self._stop.is_set():
            return None
        slots = self.concurrency - len(self._holding) - len(self._buffer)
        # Bounded and rate-limited queues are claimed within their capacity and tokens,
        # never handed off.
        queues = list(
            dict.fromkeys(
                q.name
                for q in self._pauses.claimable(self.queues)
                if q.concurrency_limit is None and q.rate_limit is None
            )
        )
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
        backoff = ErrorBackoff()
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
                delay = backoff.next_delay()
                logger.warning(
                    "worker %s: withdrawing its offer failed (%s); retrying in %.1fs",
                    self.worker_id,
                    error,
                    delay,
                )
                await self._wait_for(asyncio.Event(), delay)
                continue
            self._start(runs)
            return

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
                    if notified in done and _announced(notified):
                        self._woken = True
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


def _retrieve(future: asyncio.Future[Any]) -> None:
    """Mark a finished waiter's outcome seen, so a failed one is not reported as an
    exception nobody retrieved (what it raised is the notifier's to log)."""
    if not future.cancelled():
        future.exception()


def _announced(notified: asyncio.Future[bool] | None) -> bool:
    if notified is None or not notified.done() or notified.cancelled():
        return False
    return notified.exception() is None and bool(notified.result())
