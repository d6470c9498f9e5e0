"""LISTEN/NOTIFY wakeups: one dedicated connection wakes idle workers per environment.

Triggers ``pg_notify`` the environment on the work channel when they create a
due run (in their transaction, so a rolled-back trigger wakes nobody). This is
only a hint: workers still poll on their interval, which also covers whatever
was announced while the listening connection was down or not yet made.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
from psycopg import sql

from runlane.storage.sql.wakeups import wait_for_announcement

logger = logging.getLogger("runlane.postgres")

Connect = Callable[[], Awaitable[psycopg.AsyncConnection[Any]]]


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
            await self._disconnect()
            try:
                self._conn = await asyncio.wait_for(self._connect(), max(within, 0.1))
                await self._conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self._channel)))
            except (psycopg.Error, OSError, TimeoutError) as error:
                logger.warning("work notifications unavailable (%s); polling", type(error).__name__)
                await self._disconnect()
                return False
            except BaseException:
                await self._disconnect()
                raise
            conn = self._conn
            for event in self._pending.values():
                event.clear()
            self._reader = asyncio.get_running_loop().create_task(self._read(conn))
            return True

    async def _read(self, conn: psycopg.AsyncConnection[Any]) -> None:
        try:
            async for notice in conn.notifies():
                event = self._pending.get(notice.payload)
                if event is not None:
                    event.set()
        except (psycopg.Error, OSError) as error:
            logger.warning("work notification connection lost (%s)", type(error).__name__)
        finally:
            self._generation += 1
            for event in self._pending.values():
                event.set()

    async def _disconnect(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(psycopg.Error, OSError):
                await conn.close()
