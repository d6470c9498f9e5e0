"""Keeping an attempt's lease: how long it lasts, and its renewal in the background.

Most attempts end long before their first renewal is due, so no attempt arms a
timer of its own: one :class:`LeaseKeeper` per runner waits for every attempt's
first renewal.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING

from runlane.model.context import Signal, SignalReason
from runlane.types.durations import Duration, parse_optional_duration
from runlane.types.errors import RunlaneError, configuration_error
from runlane.types.runs import Run, RunStatus

if TYPE_CHECKING:
    from runlane.core.store import StoreScope

#: Attempts log under the name they always had, which the logging guide documents.
logger = logging.getLogger("runlane.execution")

DEFAULT_LEASE_DURATION = 30.0


@dataclass(frozen=True, slots=True)
class LeaseSettings:
    """How long a lease lasts and how often it is renewed."""

    duration: float = DEFAULT_LEASE_DURATION
    heartbeat_interval: float | None = None

    @property
    def interval(self) -> float:
        """Heartbeat every third of the lease unless told otherwise."""
        return self.heartbeat_interval or self.duration / 3

    @classmethod
    def resolve(
        cls,
        default_duration: float,
        lease_duration: Duration | None,
        heartbeat_interval: Duration | None,
    ) -> LeaseSettings:
        """A call's lease options, the duration defaulting to ``default_duration``."""
        duration = parse_optional_duration(lease_duration, name="lease_duration", allow_zero=False)
        interval = parse_optional_duration(
            heartbeat_interval, name="heartbeat_interval", allow_zero=False
        )
        settings = cls(duration or default_duration, interval)
        if settings.interval >= settings.duration:
            raise configuration_error("heartbeat_interval must be shorter than lease_duration.")
        return settings


class LeaseKeeper:
    """One timer per (event loop, heartbeat interval) for every attempt's first renewal.

    Most attempts end long before their first heartbeat is due. Each one only
    enters and leaves an insertion-ordered dict (its due time grows with the
    order of entry, as the interval is the same), instead of arming and
    cancelling a timer of its own.
    """

    def __init__(self) -> None:
        """Wait for no heartbeat yet."""
        self._due: dict[tuple[asyncio.AbstractEventLoop, float], dict[Heartbeat, float]] = {}

    def add(self, beat: Heartbeat, interval: float) -> dict[Heartbeat, float]:
        """Wait ``interval`` for ``beat``; the dict it waits in (leaving it: ``pop(beat)``)."""
        loop = asyncio.get_running_loop()
        key = (loop, interval)
        due = loop.time() + interval
        waiting = self._due.get(key)
        if waiting is None:
            waiting = self._due[key] = {}
            loop.call_at(due, self._fire, key)
        waiting[beat] = due
        return waiting

    def _fire(self, key: tuple[asyncio.AbstractEventLoop, float]) -> None:
        loop = key[0]
        waiting = self._due[key]
        now = loop.time()
        while waiting:
            beat, due = next(iter(waiting.items()))
            if due > now:
                loop.call_at(due, self._fire, key)
                return
            del waiting[beat]
            beat.due()
        # Nobody is waiting: the next attempt arms a new timer.
        del self._due[key]


class Heartbeat:
    """Renews the lease in the background and turns storage news into signals.

    The runner's :class:`LeaseKeeper`, not a timer or task of its own, waits for
    the renewal: most attempts end before it is due.
    """

    __slots__ = (
        "_interval",
        "_keeper",
        "_run",
        "_settings",
        "_signal",
        "_stopped",
        "_store",
        "_task",
        "_waiting",
    )

    def __init__(
        self,
        store: StoreScope,
        run: Run,
        settings: LeaseSettings,
        signal: Signal,
        keeper: LeaseKeeper,
    ) -> None:
        """Start waiting for the first renewal."""
        self._store = store
        self._run = run
        self._settings = settings
        self._signal = signal
        self._keeper = keeper
        self._interval = interval = settings.interval
        self._task: asyncio.Task[None] | None = None
        self._stopped = False
        self._waiting = keeper.add(self, interval)

    def _schedule(self) -> None:
        if not self._stopped:
            self._waiting = self._keeper.add(self, self._interval)

    def due(self) -> None:
        """The renewal is due (the keeper's timer): renew in a task of its own."""
        self._task = asyncio.ensure_future(self._renew())

    async def _renew(self) -> None:
        try:
            await self.beat()
        except RunlaneError as error:
            logger.warning("run %s: heartbeat failed: %s", self._run.id, error)
        if self._signal.reason is not SignalReason.LEASE_LOST:
            self._schedule()

    def stop(self) -> asyncio.Task[None] | None:
        """Stop renewing; a renewal in flight is cancelled and returned, to be awaited."""
        self._stopped = True
        # A heartbeat the keeper already let go of (renewing) is in no dict any more.
        self._waiting.pop(self, None)
        task = self._task
        if task is not None:
            task.cancel()
        return task

    async def beat(self) -> None:
        """Renew the lease now (``ctx.heartbeat()``); a lost lease or a cancellation
        request sets the attempt's signal."""
        store, run = self._store, self._run
        assert run.lease is not None
        expires = store.now() + timedelta(seconds=self._settings.duration)
        status = await store.storage.heartbeat(
            store.environment, run.id, run.lease.token, expires, store.now()
        )
        if status is None:
            self._signal.set(SignalReason.LEASE_LOST)
        elif status is RunStatus.CANCELLATION_REQUESTED:
            self._signal.set(SignalReason.CANCELLED)
