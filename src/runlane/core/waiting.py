"""``rl.runs.wait``: every waiter of a runtime shares one watcher, which listens, then
reads, then re-reads whenever storage announces finished runs and at least once a
second whatever it announces.

The order is what makes a wait never miss an outcome: the watcher hears storage's
announcements (PostgreSQL LISTEN/NOTIFY, the SQLite file wakeup) before its first
read, so a run that finishes after that read is announced, and one that finished
before it is seen by it. Announcements are only hints: a lost one (the listening
connection dropped, another process's writer the watcher cannot see) costs at most
:data:`REREAD_INTERVAL`, and the listener reconnects on its own.

A thousand waiters cost one listener and one read of all their runs per wakeup.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from runlane.core.store import StoreScope
from runlane.ports.storage import AnnouncesFinishedRuns
from runlane.types.errors import RunlaneError
from runlane.types.runs import Run

logger = logging.getLogger("runlane.runs")

#: Waiters re-read their runs at least this often (seconds), whatever storage announces.
REREAD_INTERVAL = 1.0
#: At most this long (seconds) to start listening before the first read; a listener
#: that cannot connect this fast leaves the waiters polling until it can.
LISTEN_WITHIN = 2.0
#: A busy SQLite file announces every commit; reads follow each other at least this
#: far apart (seconds), so waiters on a busy file do not read in a tight loop.
MIN_REREAD_GAP = 0.005

#: What a finished run's waiters get: the run as the caller shows it (with progress).
Finish = Callable[[list[Run]], Awaitable[list[Run]]]
#: The error a waiter of a run that does not exist gets.
NotFound = Callable[[str], RunlaneError]


class RunWatcher:
    """Waits for runs of one environment to finish, for any number of waiters."""

    def __init__(self, store: StoreScope, finish: Finish, not_found: NotFound) -> None:
        """Read runs in ``store``; ``finish`` completes the runs handed to waiters;
        ``not_found`` is raised to a waiter whose run does not exist."""
        self._store = store
        self._finish = finish
        self._not_found = not_found
        self._waiters: dict[str, list[asyncio.Future[Run]]] = {}
        self._watching: asyncio.Task[None] | None = None
        #: Set when a waiter arrives: the watcher reads at once for it.
        self._arrived: asyncio.Event | None = None

    @property
    def waiting(self) -> int:
        """How many waits are pending."""
        return sum(len(futures) for futures in self._waiters.values())

    async def wait(self, run_id: str) -> Run:
        """The run once it is terminal; ``RUN_NOT_FOUND`` (from ``not_found``) if storage
        has no such run. Cancel it (or wrap it in a timeout) to stop waiting."""
        future: asyncio.Future[Run] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(run_id, []).append(future)
        if self._arrived is None:
            self._arrived = asyncio.Event()
        self._arrived.set()
        if self._watching is None or self._watching.done():
            self._watching = asyncio.ensure_future(self._watch())
        try:
            return await future
        finally:
            futures = self._waiters.get(run_id)
            if futures is not None and future in futures:
                futures.remove(future)
                if not futures:
                    del self._waiters[run_id]

    async def close(self) -> None:
        """Stop watching (pending waits then wait until their own timeouts)."""
        watching, self._watching = self._watching, None
        if watching is not None:
            watching.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await watching

    async def _watch(self) -> None:
        store = self._store
        storage = store.storage
        notifier = storage if isinstance(storage, AnnouncesFinishedRuns) else None
        arrived = self._arrived
        assert arrived is not None
        heard: asyncio.Task[bool] | None = None
        loop = asyncio.get_running_loop()
        try:
            if notifier is not None:
                try:
                    await notifier.listen_for_finished_runs(store.environment, LISTEN_WITHIN)
                except RunlaneError as error:
                    logger.warning("run waiters poll: %s", error)
            while self._waiters:
                arrived.clear()
                read_at = loop.time()
                await self._read()
                if not self._waiters:
                    break
                if notifier is not None and (heard is None or heard.done()):
                    heard = loop.create_task(
                        notifier.wait_for_finished_runs(store.environment, REREAD_INTERVAL)
                    )
                await _first_of(heard, arrived, REREAD_INTERVAL)
                if heard is not None and heard.done() and not heard.cancelled():
                    failure = heard.exception()
                    if failure is not None:
                        # Listening failed this round (the next one tries again); the
                        # re-read below does not need it.
                        logger.warning("run waiters' listener failed: %s", failure)
                gap = read_at + MIN_REREAD_GAP - loop.time()
                if gap > 0:
                    await asyncio.sleep(gap)
        finally:
            # Not awaited: between the last look at the waiters and this task's end there
            # must be no await, or a waiter arriving then would find a watcher that is
            # about to stop and not start another.
            if heard is not None and not heard.done():
                heard.cancel()

    async def _read(self) -> None:
        """Read every waited run once; hand the finished (and the missing) to their waiters."""
        store = self._store
        ids = list(self._waiters)
        try:
            runs = await store.storage.get_runs(store.environment, ids)
            finished = [run for run in runs if run.status.is_terminal]
            if finished:
                finished = await self._finish(finished)
        except RunlaneError as error:
            # Storage away for a moment: the waiters keep waiting (their timeouts bound
            # them), and the next round reads again.
            logger.warning("run waiters could not read storage: %s", error)
            return
        found = {run.id for run in runs}
        for run in finished:
            for future in self._waiters.pop(run.id, ()):
                if not future.done():
                    future.set_result(run)
        for run_id in ids:
            if run_id not in found:
                for future in self._waiters.pop(run_id, ()):
                    if not future.done():
                        future.set_exception(self._not_found(run_id))


async def _first_of(
    heard: asyncio.Task[bool] | None, arrived: asyncio.Event, within: float
) -> None:
    """Return once ``heard`` is done, ``arrived`` is set, or ``within`` seconds passed."""
    if arrived.is_set():
        return
    arrival: asyncio.Future[object] = asyncio.ensure_future(arrived.wait())
    waits: set[asyncio.Future[object]] = {arrival}
    if heard is not None:
        waits.add(heard)  # type: ignore[arg-type]
    try:
        await asyncio.wait(waits, timeout=within, return_when=asyncio.FIRST_COMPLETED)
    finally:
        arrival.cancel()
