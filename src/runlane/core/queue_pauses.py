"""Paused queues as this process knows them, and ``rl.queues``: pausing, resuming
and listing queues (SPEC-flow 7.3).

A pause is stored; every claimer of this process (workers, ``execute_next``,
``execute_delivery``, hand-off offers, tick's delivery requests) leaves the paused
queues out of what it asks storage for. Claims do not read the pause table each
time: the claim is the tuned hot path, and a pause needs to be honoured within one
poll interval, not within one statement. So the set is read again at most every
:data:`PAUSES_MAX_AGE` seconds by callers that claim now and then, every poll
interval by each polling worker, and at once in the process that paused or resumed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from runlane.core.store import StoreScope
from runlane.model.queue_defs import QueueDef
from runlane.model.rate_limiting import next_token_at, tokens_available
from runlane.types.clock import from_micros, to_micros
from runlane.types.errors import ErrorCode, RunlaneError, configuration_error
from runlane.types.rate_limits import RateLimit
from runlane.types.records import QueuePolicy, RateLimitState
from runlane.types.storable_text import unstorable

logger = logging.getLogger("runlane.queues")

#: Seconds a read of the paused queues serves claims that are not a polling worker's
#: (those re-read every poll interval): the default poll interval.
PAUSES_MAX_AGE = 0.5
#: Longest pause reason kept, in characters.
MAX_PAUSE_REASON = 500


class PausedQueues:
    """The names of the paused queues, as last read from storage."""

    def __init__(self, store: StoreScope, max_age: float = PAUSES_MAX_AGE) -> None:
        self._store = store
        self._max_age = max_age
        self._read_at: float | None = None
        #: Paused queue names; empty (the common case) keeps every claim unfiltered.
        self.names: frozenset[str] = frozenset()

    async def refresh(self) -> frozenset[str]:
        """Read the paused queues from storage now."""
        store = self._store
        pauses = await store.storage.list_queue_pauses(store.environment)
        self.names = frozenset(p.queue for p in pauses)
        self._read_at = time.monotonic()
        return self.names

    async def current(self) -> frozenset[str]:
        """The paused queues, read again when the last read is older than the max age."""
        if self._read_at is None or time.monotonic() - self._read_at >= self._max_age:
            return await self.refresh()
        return self.names

    def note(self, queue: str, paused: bool) -> None:
        """Record a pause or resume this process just stored (no wait for the next read)."""
        self.names = self.names | {queue} if paused else self.names - {queue}

    def claimable(self, queues: list[QueuePolicy]) -> list[QueuePolicy]:
        """``queues`` without the paused ones (``queues`` itself when none is paused)."""
        names = self.names
        if not names:
            return queues
        return [q for q in queues if q.name not in names]


@dataclass(frozen=True, slots=True)
class QueueInfo:
    """A registered queue as operators see it: its limits and whether it is paused."""

    name: str
    paused: bool
    paused_at: datetime | None
    paused_reason: str | None
    concurrency_limit: int | None
    default: bool
    #: Attempt starts allowed per period (None: unlimited).
    rate_limit: RateLimit | None = None
    #: When the rate-limited queue may start a run again; None while it has a token.
    #: On a queue limited per key: the soonest next token of a key whose due runs
    #: wait for one.
    next_token_at: datetime | None = None
    #: ``"key"`` when each run's rate key is limited apart (else None).
    rate_limit_by: str | None = None
    #: On a queue limited per key: the keys whose due runs wait for a token, soonest
    #: next token first (at most :data:`LIMITED_KEYS_SHOWN`), with that time.
    limited_keys: tuple[tuple[str, datetime], ...] = ()


#: How many waiting keys of a queue limited per key ``rl.queues.list()`` names.
LIMITED_KEYS_SHOWN = 5


def _limited_keys(
    limit: RateLimit, queue: str, states: Sequence[RateLimitState], now_us: int
) -> tuple[tuple[str, datetime], ...]:
    """The keys of ``queue`` whose due runs wait for a token, soonest token first."""
    waiting = sorted(
        (next_token_at(limit, s.tat, now_us), s.rate_key)
        for s in states
        if s.queue == queue and s.due > 0 and tokens_available(limit, s.tat, now_us) < 1
    )
    return tuple((key, from_micros(at)) for at, key in waiting[:LIMITED_KEYS_SHOWN])


class RequestsDeliveries(Protocol):
    """What resuming needs on a lane with a transport: wake the queue's due runs."""

    async def request_due_deliveries(self) -> int:
        """Append delivery requests for due runs that have none."""
        ...

    async def publish_pending(self) -> tuple[int, int]:
        """Publish every publishable delivery request."""
        ...


class Queues(Mapping[str, QueueDef]):
    """``rl.queues``: the registered queues by name (a read-only mapping), which
    operators also pause, resume and list.

    >>> await rl.queues.pause("emails", reason="provider incident")
    >>> paused = [q.name for q in await rl.queues.list() if q.paused]
    >>> await rl.queues.resume("emails")
    """

    def __init__(
        self,
        store: StoreScope,
        queues: Mapping[str, QueueDef],
        pauses: PausedQueues,
        connect: Callable[[], Awaitable[None]],
        *,
        on_resumed: Callable[[], None],
        dispatcher: RequestsDeliveries | None,
        eager_dispatch: bool,
    ) -> None:
        """Operate on the registered ``queues`` in ``store``; ``pauses`` is this process's
        view of the paused ones, ``on_resumed`` wakes its idle workers, and a lane with
        a transport wakes the resumed queue's runs through ``dispatcher``."""
        self._store = store
        self._queues = queues
        self._pauses = pauses
        self._connect = connect
        self._on_resumed = on_resumed
        self._dispatcher = dispatcher
        self._eager_dispatch = eager_dispatch

    def __getitem__(self, name: str) -> QueueDef:
        return self._queues[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._queues)

    def __len__(self) -> int:
        return len(self._queues)

    def __repr__(self) -> str:
        return f"Queues({sorted(self._queues)!r})"

    async def list(self) -> list[QueueInfo]:
        """Every registered queue, by name, with its limits and pause state."""
        store = self._store
        await self._connect()
        pauses = {p.queue: p for p in await store.storage.list_queue_pauses(store.environment)}
        now = store.now()  # one instant for the waiting runs and the token checks
        states: list[RateLimitState] = []
        if any(q.rate_limit is not None for q in self._queues.values()):
            states = await store.storage.list_rate_limit_states(store.environment, now)
        tats = {(s.queue, s.rate_key): s.tat for s in states}
        now_us = to_micros(now)
        items = []
        for name, definition in sorted(self._queues.items()):
            pause = pauses.get(name)
            next_token = None
            limited: tuple[tuple[str, datetime], ...] = ()
            if definition.rate_limit is not None and definition.rate_limit_by is not None:
                limited = _limited_keys(definition.rate_limit, name, states, now_us)
                next_token = limited[0][1] if limited else None
            elif definition.rate_limit is not None:
                at = next_token_at(definition.rate_limit, tats.get((name, "")), now_us)
                next_token = from_micros(at) if at > now_us else None
            items.append(
                QueueInfo(
                    name=name,
                    paused=pause is not None,
                    paused_at=pause.paused_at if pause else None,
                    paused_reason=pause.reason if pause else None,
                    concurrency_limit=definition.concurrency_limit,
                    default=definition.default,
                    rate_limit=definition.rate_limit,
                    next_token_at=next_token,
                    rate_limit_by=definition.rate_limit_by,
                    limited_keys=limited,
                )
            )
        return items

    async def pause(self, queue: QueueDef | str, reason: str | None = None) -> QueueInfo:
        """Stop every worker from starting runs of ``queue`` until :meth:`resume`.

        The pause is stored: workers in every process honour it within one poll
        interval (this process's at once). Runs already running finish; triggers
        are still accepted and their runs wait; maintenance goes on. Pausing a
        paused queue keeps its first pause. An unregistered queue raises
        ``QUEUE_NOT_FOUND`` and a reason that is not text of at most 500 characters
        ``CONFIGURATION_INVALID``; neither stores anything.
        """
        name = self._registered(queue)
        if reason is not None:
            if not isinstance(reason, str):
                raise configuration_error("a pause reason must be a string.")
            if len(reason) > MAX_PAUSE_REASON:
                raise configuration_error(
                    f"a pause reason must be at most {MAX_PAUSE_REASON} characters."
                )
            problem = unstorable(reason)
            if problem:
                raise configuration_error(f"a pause reason must not contain {problem}.")
        store = self._store
        await self._connect()
        pause = await store.storage.pause_queue(store.environment, name, reason, store.now())
        self._pauses.note(name, True)
        logger.info(
            "queue %s paused%s",
            name,
            f" ({pause.reason})" if pause.reason else "",
            extra={"event": "queue.paused", "queue": name},
        )
        definition = self._queues[name]
        return QueueInfo(
            name,
            True,
            pause.paused_at,
            pause.reason,
            definition.concurrency_limit,
            definition.default,
            definition.rate_limit,
        )

    async def resume(self, queue: QueueDef | str) -> QueueInfo:
        """Let workers start runs of ``queue`` again. On a lane with a transport its
        waiting runs get delivery requests again (their wakeups were ignored with
        ``queue_paused``). Resuming a queue that is not paused changes nothing."""
        name = self._registered(queue)
        store = self._store
        await self._connect()
        resumed = await store.storage.resume_queue(store.environment, name)
        self._pauses.note(name, False)
        if resumed:
            logger.info("queue %s resumed", name, extra={"event": "queue.resumed", "queue": name})
            if self._dispatcher is not None:
                await self._dispatcher.request_due_deliveries()
                if self._eager_dispatch:
                    await self._dispatcher.publish_pending()
            self._on_resumed()
        definition = self._queues[name]
        return QueueInfo(
            name,
            False,
            None,
            None,
            definition.concurrency_limit,
            definition.default,
            definition.rate_limit,
        )

    def _registered(self, queue: QueueDef | str) -> str:
        name = queue.name if isinstance(queue, QueueDef) else queue
        if not isinstance(name, str) or name not in self._queues:
            raise RunlaneError(
                ErrorCode.QUEUE_NOT_FOUND,
                f"queue {name!r} is not registered with this runtime "
                f"(registered: {sorted(self._queues)}).",
                meta={"queue": name if isinstance(name, str) else repr(name)},
            )
        return name
