"""LISTEN/NOTIFY wakeups: one dedicated connection wakes idle workers per environment.

Triggers ``pg_notify`` the environment on the work channel when they create a
due run (in their transaction, so a rolled-back trigger wakes nobody). This is
only a hint: workers still poll on their interval, which also covers whatever
was announced while the listening connection was down or not yet made.

The same connection hears hand-offs (see :mod:`runlane.storage.postgres.standby`):
each time it connects it listens on a channel of its own as well and takes a
session advisory lock, which it holds for as long as it lives. Workers of this
process name both in their offers; a trigger hands runs only to offers whose lock
is held, so a connection that died (and its process) is never handed anything.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

import psycopg
from psycopg import sql

from runlane.storage.sql.wakeups import wait_for_announcement

logger = logging.getLogger("runlane.postgres")

#: After the listening connection could not be made, the next attempt waits this many
#: seconds, doubling (with jitter) up to the maximum while attempts fail; a lost
#: connection is made again at the next wait, at once.
RECONNECT_BACKOFF_INITIAL = 0.25
RECONNECT_BACKOFF_MAX = 5.0

Connect = Callable[[], Awaitable[psycopg.AsyncConnection[Any]]]

#: A work notification whose payload is an environment plus this says its queue pauses
#: changed (environments never hold ':').
PAUSES_SUFFIX = ":pauses"


class HandoffReceiver(Protocol):
    """An offer hearing its hand-offs."""

    def deliver(self, run_id: str, row_text: str | None) -> None:
        """Run ``run_id`` was handed over; ``row_text`` is its row, unless too large."""

    def lost(self) -> None:
        """Hand-offs may have been missed (the connection was lost)."""


@dataclass(frozen=True, slots=True)
class HandoffAddress:
    """Where a connection of a listener hears hand-offs, and the lock it holds."""

    channel: str
    lock_key: int


class WorkListener:
    """Waits for work notifications on ``channel``; reconnects lazily when the link breaks."""

    def __init__(self, connect: Connect, channel: str) -> None:
        self._connect = connect
        self._channel = channel
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._reader: asyncio.Task[None] | None = None
        self._starting: asyncio.Lock | None = None
        self._pending: dict[str, asyncio.Event] = {}
        #: Bumped whenever the connection is lost, so waiters woken by the loss say "no news".
        self._generation = 0
        #: The live connection's hand-off channel and lock (None while not listening).
        self._address: HandoffAddress | None = None
        #: Offers hearing hand-offs, by lease token.
        self._receivers: dict[str, HandoffReceiver] = {}
        #: While connecting fails: no new attempt before this loop time (workers poll
        #: meanwhile), so an outage costs one attempt per backoff step, not one per poll.
        self._retry_at = 0.0
        self._retry_step = RECONNECT_BACKOFF_INITIAL
        #: Bumped by every pause announcement heard (of any environment: a worker of
        #: another one reads its pauses once for nothing) and every lost connection.
        self.pause_epoch = 0

    @property
    def listening(self) -> bool:
        """Whether the listening connection is up."""
        return self._reader is not None and not self._reader.done()

    async def wait(self, environment: str, within: float) -> bool:
        """True once work for ``environment`` was announced (maybe before this call);
        False after ``within`` seconds or when notifications may have been missed."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(within, 0.0)
        if not self.listening and not await self._start(within):
            await asyncio.sleep(max(deadline - loop.time(), 0.0))
            return False
        event = self._pending.setdefault(environment, asyncio.Event())
        return await wait_for_announcement(event, deadline, lambda: self._generation)

    async def start(self, within: float) -> bool:
        """Listen now (connecting within ``within`` seconds) unless already listening."""
        return self.listening or await self._start(within)

    async def address(self, within: float) -> HandoffAddress | None:
        """The hand-off channel and lock of the live connection, connecting if needed
        (at most ``within`` seconds); None when it cannot listen."""
        if not self.listening and not await self._start(within):
            return None
        return self._address

    def receive(self, token: str, receiver: HandoffReceiver) -> None:
        """Pass hand-offs to the offer ``token`` to ``receiver`` until :meth:`forget`."""
        self._receivers[token] = receiver

    def forget(self, token: str) -> None:
        """Stop passing hand-offs to the offer ``token``."""
        self._receivers.pop(token, None)

    async def close(self) -> None:
        """Stop listening."""
        reader, self._reader = self._reader, None
        if reader is not None:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await reader
        await self._disconnect()

    async def _start(self, within: float) -> bool:
        if self._starting is None:
            self._starting = asyncio.Lock()
        async with self._starting:
            if self.listening:
                return True
            loop = asyncio.get_running_loop()
            if loop.time() < self._retry_at:
                return False
            await self._disconnect()
            # A fresh channel and lock per connection: offers naming an older one are
            # seen as dead by triggers (its lock went with its connection).
            address = HandoffAddress(
                f"{self._channel}_{secrets.token_hex(8)}", secrets.randbits(63)
            )
            try:
                self._conn = await asyncio.wait_for(self._connect(), max(within, 0.1))
                await self._conn.execute("SELECT pg_advisory_lock(%s)", (address.lock_key,))
                for channel in (self._channel, address.channel):
                    await self._conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
            except (psycopg.Error, OSError, TimeoutError) as error:
                step = self._retry_step
                self._retry_step = min(step * 2, RECONNECT_BACKOFF_MAX)
                delay = random.uniform(step / 2, step)
                self._retry_at = loop.time() + delay
                logger.warning(
                    "work notifications unavailable (%s); polling, listening again in %.1fs",
                    type(error).__name__,
                    delay,
                )
                await self._disconnect()
                return False
            except BaseException:
                await self._disconnect()
                raise
            conn = self._conn
            self._retry_step = RECONNECT_BACKOFF_INITIAL
            for event in self._pending.values():
                event.clear()
            self._address = address
            self._reader = asyncio.get_running_loop().create_task(self._read(conn, address))
            return True

    async def _read(self, conn: psycopg.AsyncConnection[Any], address: HandoffAddress) -> None:
        try:
            async for notice in conn.notifies():
                if notice.channel == address.channel:
                    self._hand_over(notice.payload)
                    continue
                payload = notice.payload
                if payload.endswith(PAUSES_SUFFIX):
                    # The environment's pauses changed: note it, and wake its idle
                    # workers (a resumed queue's runs may start now).
                    payload = payload[: -len(PAUSES_SUFFIX)]
                    self.pause_epoch += 1
                event = self._pending.get(payload)
                if event is not None:
                    event.set()
        except (psycopg.Error, OSError) as error:
            logger.warning("work notification connection lost (%s)", type(error).__name__)
        finally:
            self._generation += 1
            self.pause_epoch += 1
            self._address = None
            for event in self._pending.values():
                event.set()
            for receiver in list(self._receivers.values()):
                receiver.lost()

    def _hand_over(self, payload: str) -> None:
        """Pass a hand-off (``[token, run id]``, then a line with the run's row unless
        it was too large) to its offer, if this process still has it."""
        head, _, row_text = payload.partition("\n")
        try:
            token, run_id = json.loads(head)
        except ValueError:
            logger.warning("malformed hand-off notification ignored")
            return
        receiver = self._receivers.get(token)
        if receiver is not None:
            receiver.deliver(run_id, row_text or None)

    async def _disconnect(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(psycopg.Error, OSError):
                await conn.close()
