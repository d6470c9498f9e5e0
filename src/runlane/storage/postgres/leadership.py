"""Maintenance leadership: a session-level advisory lock on a connection of its own.

The lock lives exactly as long as the session that took it. A leader that dies
(killed, crashed, host gone) loses its connection, the server ends the session
and the lock is free for the next contender at once; no expiry time is needed. A
leader whose connection dropped finds out at its next renewal (the ping fails),
stops leading, and contends again on a new connection. Until the server notices
a silently dead peer (keepalives, about a minute) nobody else can take the lock:
maintenance pauses rather than running twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg

logger = logging.getLogger("runlane.postgres")

Connect = Callable[[], Awaitable[psycopg.AsyncConnection[Any]]]

_TRY_LOCK = "SELECT pg_try_advisory_lock(hashtextextended(%(name)s, 0))"
_UNLOCK = "SELECT pg_advisory_unlock(hashtextextended(%(name)s, 0))"


def lock_name(schema: str, environment: str) -> str:
    """The advisory lock's name: one per schema and environment."""
    return f"runlane.maintenance:{schema}:{environment}"


class MaintenanceLeadership:
    """Who leads maintenance, per environment, as far as this storage knows."""

    def __init__(self, connect: Connect, schema: str) -> None:
        self._connect = connect
        self._schema = schema
        #: The lock-holding (or contending) connection and its holder, per environment.
        self._sessions: dict[str, tuple[psycopg.AsyncConnection[Any], str | None]] = {}
        self._busy: asyncio.Lock | None = None

    async def hold(self, environment: str, holder: str) -> bool:
        """True while ``holder`` has the lock; takes it when it is free."""
        if self._busy is None:
            self._busy = asyncio.Lock()
        async with self._busy:
            return await self._hold(environment, holder)

    async def _hold(self, environment: str, holder: str) -> bool:
        conn, current = self._sessions.get(environment, (None, None))
        if current is not None and current != holder:
            return False  # another holder in this process leads on this session
        if conn is not None and not conn.closed:
            try:
                if current == holder:
                    await conn.execute("SELECT 1")
                    return True
                return await self._try_lock(environment, conn, holder)
            except psycopg.Error as error:
                logger.warning(
                    "maintenance leadership of %s: connection lost (%s)", environment, error
                )
                await self._drop(environment)
        conn = await self._connect()
        self._sessions[environment] = (conn, None)
        try:
            return await self._try_lock(environment, conn, holder)
        except psycopg.Error:
            await self._drop(environment)
            raise

    async def release(self, environment: str, holder: str) -> None:
        """Unlock if ``holder`` has the lock (a graceful stop hands over at once)."""
        conn, current = self._sessions.get(environment, (None, None))
        if conn is None or current != holder:
            return
        try:
            await conn.execute(_UNLOCK, {"name": lock_name(self._schema, environment)})
            self._sessions[environment] = (conn, None)
        except psycopg.Error:
            await self._drop(environment)  # the session ended, and the lock with it

    async def close(self) -> None:
        """Close every session: any lock held is released by the server."""
        for environment in list(self._sessions):
            await self._drop(environment)

    async def _try_lock(
        self, environment: str, conn: psycopg.AsyncConnection[Any], holder: str
    ) -> bool:
        cur = await conn.execute(_TRY_LOCK, {"name": lock_name(self._schema, environment)})
        row = await cur.fetchone()
        taken = bool(row and row[0])
        self._sessions[environment] = (conn, holder if taken else None)
        return taken

    async def _drop(self, environment: str) -> None:
        conn, _ = self._sessions.pop(environment, (None, None))
        if conn is not None:
            with contextlib.suppress(psycopg.Error):
                await conn.close()
