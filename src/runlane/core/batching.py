"""Group concurrent writes into one storage call (natural batching, no timers).

The first write starts a flush right away; writes that arrive while it is in
flight ride on the next one. Under load this turns N settles into a handful of
round trips; when idle it adds no latency.

A worker's own batcher may also carry claims: a flush then settles and claims
the next runs in one storage call (see :class:`ClaimHook`), so a busy worker
commits once per batch instead of twice; and it may keep more than one flush in
flight, so storage writes one batch while the worker runs the next.

Every transition a batcher writes settles an attempt: each flush tells its
:class:`SettleCounter` (the throughput rollup) which ones it wrote, once per batch.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, cast

from runlane.core.store import StoreScope
from runlane.ports.storage import SettlesAndClaims
from runlane.types.errors import ErrorCode, RunlaneError
from runlane.types.records import LeaseRequest, QueuePolicy, Transition
from runlane.types.runs import Run

logger = logging.getLogger("runlane.worker")

#: Most transitions written in one storage call.
MAX_SETTLE_BATCH = 500

#: Pauses before writing a batch again after storage was unavailable (a restart, a
#: failover, a dropped connection): about six seconds in all. Each transition is a
#: compare-and-set on its attempt's fencing token, so writing it twice is harmless, and
#: a settle that gets through saves its run from running again after its lease expires.
SETTLE_RETRY_DELAYS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 2.0)


#: Told how a transition handed to :meth:`TransitionBatcher.submit` went: the time it
#: was written at (``None``: its compare-and-set condition failed), or the error that
#: kept its batch from being written.
Written = Callable[[datetime | None, BaseException | None], None]

#: A transition waiting to be written: with its run as leased, and the future or
#: callback to tell how it went.
_Pending = tuple[Transition, Run | None, "asyncio.Future[datetime | None] | Written"]


@dataclass(frozen=True, slots=True)
class ClaimRequest:
    """A claim to make together with a flush of settles."""

    queues: Sequence[QueuePolicy]
    limit: int
    lease: LeaseRequest


class SettleCounter(Protocol):
    """Counts the attempts a batcher settled (the throughput rollup)."""

    def count_settled(self, settled: Iterable[tuple[Transition, Run]], at: datetime) -> None:
        """One flush wrote these settles at ``at``, each with its run as leased."""
        ...


class ClaimHook(Protocol):
    """The worker side of a batcher that claims while it settles."""

    def claim_request(self, settling: int) -> ClaimRequest | None:
        """The claim to make with a flush of ``settling`` settles, if any."""
        ...

    def claimed(self, runs: list[Run], request: ClaimRequest) -> None:
        """The runs a flush claimed for ``request`` (none if the claim failed)."""
        ...

    def flushed(self) -> None:
        """A flush ended (the batcher may have become idle)."""
        ...


class TransitionBatcher:
    """Applies the transitions that settle attempts, batching those that arrive together."""

    def __init__(
        self,
        store: StoreScope,
        *,
        max_batch: int = MAX_SETTLE_BATCH,
        max_flushes: int = 1,
        claims: ClaimHook | None = None,
        counter: SettleCounter | None = None,
    ) -> None:
        self._store = store
        self._counter = counter
        #: Most settles in one write that carries a claim (alone, up to MAX_SETTLE_BATCH).
        self._max_batch = max(1, min(max_batch, MAX_SETTLE_BATCH))
        self._max_flushes = max(1, max_flushes)
        self._claims = claims if isinstance(store.storage, SettlesAndClaims) else None
        #: Transitions to write, oldest first.
        self._pending: list[_Pending] = []
        #: Flush tasks started and not finished; whether one has not taken its batch yet.
        self._flushes: set[asyncio.Task[None]] = set()
        self._starting = False

    @property
    def idle(self) -> bool:
        """Whether nothing is waiting to be written or being written."""
        return not self._pending and not self._flushes

    async def apply(self, transition: Transition, leased: Run | None) -> datetime | None:
        """Apply one transition that settles the attempt ``leased`` (the run as it was
        leased for it; ``None``: a run given back unstarted, which counts in no
        throughput); the time it was written at (the stored run is
        ``project(run, transition, that time)``), or ``None`` when its compare-and-set
        condition failed. The caller builds the stored run only if it needs it."""
        future: asyncio.Future[datetime | None] = asyncio.get_running_loop().create_future()
        self._pending.append((transition, leased, future))
        self._start_flush()
        return await future

    def submit(self, transition: Transition, leased: Run, written: Written) -> None:
        """Apply one transition as :meth:`apply` does, without waiting: ``written`` is
        called, from the flush that wrote it, as :meth:`apply` would return (or raise).

        A worker writes its attempts' outcomes this way: an attempt then ends when its
        handler does, with no task left waiting for the batch.
        """
        self._pending.append((transition, leased, written))
        self._start_flush()

    def _start_flush(self) -> None:
        # A new flush starts on the next turn of the loop and takes everything pending
        # by then: writes that arrive together go together.
        if self._pending and not self._starting and len(self._flushes) < self._max_flushes:
            self._starting = True
            task = asyncio.ensure_future(self._flush())
            self._flushes.add(task)
            task.add_done_callback(self._flushes.discard)

    async def _flush(self) -> None:
        self._starting = False
        try:
            while self._pending:
                await self._flush_once()
        finally:
            task = asyncio.current_task()
            if task is not None:
                self._flushes.discard(task)
            if self._claims is not None:
                self._claims.flushed()

    async def _flush_once(self) -> None:
        store = self._store
        hook = self._claims
        size = self._max_batch
        request = hook.claim_request(min(size, len(self._pending))) if hook is not None else None
        if request is None:
            # The cap only splits settles that carry a claim; alone, they go together.
            size = MAX_SETTLE_BATCH
        batch, self._pending = self._pending[:size], self._pending[size:]
        # What is left may go out in another flush at the same time.
        self._start_flush()
        now = store.now()
        transitions = [t for t, _, _ in batch]
        claimed: list[Run] = []
        try:
            if request is None:
                applied = await self._apply(transitions, now)
            else:
                applied, claimed = await self._apply_and_claim(transitions, now, request)
        except BaseException as error:
            for _, _, waiter in batch:
                _tell(waiter, None, error)
            if hook is not None and request is not None:
                hook.claimed([], request)
            if not isinstance(error, Exception):
                raise
            return
        counter = self._counter
        if counter is not None:
            counter.count_settled(
                [
                    (t, leased)
                    for (t, leased, _), ok in zip(batch, applied, strict=True)
                    if ok and leased is not None
                ],
                now,
            )
        for (_, _, waiter), ok in zip(batch, applied, strict=True):
            _tell(waiter, now if ok else None, None)
        if hook is not None and request is not None:
            hook.claimed(claimed, request)

    async def _apply_and_claim(
        self, transitions: list[Transition], now: datetime, request: ClaimRequest
    ) -> tuple[list[bool], list[Run]]:
        store = self._store
        combined = cast(SettlesAndClaims, store.storage)  # checked when the hook was accepted
        try:
            return await combined.apply_transitions_and_claim(
                store.environment, transitions, now, request.queues, request.limit, request.lease
            )
        except Exception as error:
            # Settles must not fail because a claim did: write them on their own.
            logger.warning("settling and claiming failed (%s); settling alone", error)
            return await self._apply(transitions, now), []

    async def _apply(self, transitions: list[Transition], now: datetime) -> list[bool]:
        """Write ``transitions``, again after short pauses while storage is unavailable."""
        store = self._store
        for delay in SETTLE_RETRY_DELAYS:
            try:
                return await store.storage.apply_transitions(store.environment, transitions, now)
            except RunlaneError as error:
                # Closed storage (the runtime is shutting down) does not come back.
                if error.code != ErrorCode.STORAGE_UNAVAILABLE or error.meta.get("open") is False:
                    raise
                logger.warning(
                    "writing %d settles failed (%s); trying again in %ss",
                    len(transitions),
                    error,
                    delay,
                )
            await asyncio.sleep(delay)
        return await store.storage.apply_transitions(store.environment, transitions, now)


def _tell(
    waiter: asyncio.Future[datetime | None] | Written,
    written: datetime | None,
    error: BaseException | None,
) -> None:
    """Tell an :meth:`~TransitionBatcher.apply` caller's future, or a
    :meth:`~TransitionBatcher.submit` callback, how its transition went."""
    if isinstance(waiter, asyncio.Future):
        if not waiter.done():
            if error is None:
                waiter.set_result(written)
            else:
                waiter.set_exception(error)
        return
    try:
        waiter(written, error)
    except Exception:
        # One caller's bookkeeping must not keep the rest of the batch from hearing.
        logger.exception("a settle's callback failed")
