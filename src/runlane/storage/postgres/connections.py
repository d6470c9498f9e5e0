"""Connections: settings, the pool's per-connection setup and cheap health check, and
the spare connection a lone caller uses instead of the pool."""

from __future__ import annotations

import asyncio
import contextlib
import re
import select
import time
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.pq import TransactionStatus
from psycopg_pool import AsyncConnectionPool

from runlane.storage.postgres.sessions import DriverConnection, load_json_as_text
from runlane.types.errors import ErrorCode, RunlaneError

Connection = DriverConnection

DEFAULT_APPLICATION_NAME = "runlane"
#: Seconds the spare connection waits after a failed opening before it tries again.
SPARE_RETRY_AFTER = 1.0
_SAFE_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")

#: The listening connection notices a silently dead peer within about a minute.
LISTENER_OPTIONS: dict[str, Any] = {
    "autocommit": True,
    "keepalives": 1,
    "keepalives_idle": 30,
    "keepalives_interval": 10,
    "keepalives_count": 3,
}


def check_options(
    schema_name: object,
    min_size: object,
    max_size: object,
    connect_timeout: object,
    pool_timeout: object,
) -> None:
    """Reject bad constructor options at the call (CONFIGURATION_INVALID)."""
    if not isinstance(schema_name, str) or not _SAFE_IDENTIFIER.match(schema_name):
        raise RunlaneError(
            ErrorCode.CONFIGURATION_INVALID,
            "schema must be a plain identifier (letters, digits, underscores; at most 63).",
        )
    for name, size in (("min_size", min_size), ("max_size", max_size)):
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise RunlaneError(
                ErrorCode.CONFIGURATION_INVALID, f"{name} must be a whole number of at least 1."
            )
    assert isinstance(min_size, int) and isinstance(max_size, int)
    if min_size > max_size:
        raise RunlaneError(ErrorCode.CONFIGURATION_INVALID, "min_size exceeds max_size.")
    for name, seconds in (("connect_timeout", connect_timeout), ("pool_timeout", pool_timeout)):
        if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds <= 0:
            raise RunlaneError(
                ErrorCode.CONFIGURATION_INVALID, f"{name} must be a positive number of seconds."
            )


def connect_kwargs(
    dsn: str, application_name: str | None, connect_timeout: float
) -> dict[str, Any]:
    """Connection settings the DSN does not already choose."""
    chosen = conninfo_to_dict(dsn)
    kwargs: dict[str, Any] = {}
    if application_name is not None or "application_name" not in chosen:
        kwargs["application_name"] = application_name or DEFAULT_APPLICATION_NAME
    if "connect_timeout" not in chosen:
        kwargs["connect_timeout"] = max(1, round(connect_timeout))
    return kwargs


async def configure_pooled(conn: psycopg.AsyncConnection[Any]) -> None:
    """Set up a pooled connection: JSON handed over as text (see :mod:`.sessions`), no JIT.

    Prepared claim statements get generic plans whose estimated cost (with
    unknown parameters, over a large table) passes ``jit_above_cost``; compiling
    them costs tens of milliseconds per execution for statements that touch a
    few index entries.
    """
    load_json_as_text(conn.adapters)
    await conn.execute("SET jit = off")


async def check_pooled(conn: psycopg.AsyncConnection[Any]) -> None:
    """Pool check without a round trip in the common case.

    An idle connection has nothing to read. If its socket is readable, the server
    sent something (typically "terminating connection" before a restart) or hung
    up: ask it properly, and the pool replaces it if it is gone. So after a server
    restart, stale connections are dropped before anyone uses them.
    """
    if conn.closed or conn.broken:
        raise psycopg.OperationalError("connection closed")
    if socket_readable(conn.pgconn.socket):
        await AsyncConnectionPool.check_connection(conn)


def socket_readable(fd: int) -> bool:
    """Whether ``fd`` has data or a hang-up waiting, without blocking.

    A one-shot ``poll`` costs about a microsecond, a tenth of building a ``selectors``
    selector (an epoll instance), which matters on every call; ``select`` serves
    where ``poll`` does not exist (Windows). A hang-up reads as readable on both.
    """
    poll = getattr(select, "poll", None)
    if poll is not None:
        poller = poll()
        poller.register(fd, select.POLLIN)
        return bool(poller.poll(0))
    readable, _, errored = select.select([fd], [], [fd], 0)
    return bool(readable or errored)


class SpareConnection:
    """A connection of the driver's own that a call takes when it finds it free,
    before it asks the pool.

    A lone caller, such as one producer triggering in a loop, then skips the pool's
    checkout (its lock, waiting list, health check and return) on every call;
    concurrent callers find it busy and use the pool as before. It is opened in the
    background on first need, and dropped (to be opened again later) when it is not
    idle after a call, was closed or broken, or has something to read while idle (the
    server is closing it).
    """

    def __init__(
        self,
        connect: Callable[[], Awaitable[Connection]],
        *,
        retry_after: float = SPARE_RETRY_AFTER,
    ) -> None:
        """Open connections with ``connect``; after a failed opening, wait
        ``retry_after`` seconds before the next (the pool serves meanwhile)."""
        self._connect = connect
        self._retry_after = retry_after
        self._conn: Connection | None = None
        self._busy = False
        self._opening: asyncio.Task[None] | None = None
        self._next_opening = 0.0
        self._closing: set[asyncio.Task[None]] = set()

    def take(self) -> Connection | None:
        """The connection, now marked busy; ``None`` when busy or not (yet) usable."""
        if self._busy:
            return None
        conn = self._conn
        if conn is None or conn.closed or conn.broken or socket_readable(conn.pgconn.socket):
            self._drop()
            if self._opening is None and time.monotonic() >= self._next_opening:
                self._opening = asyncio.create_task(self._open())
            return None
        self._busy = True
        return conn

    def give_back(self, conn: Connection) -> None:
        """End a call that :meth:`take` allowed; keep the connection only if it is idle."""
        self._busy = False
        # libpq's status as it is: conn.info would build an info object and an enum.
        if conn.closed or conn.broken or conn.pgconn.transaction_status != TransactionStatus.IDLE:
            # Cancelled mid-statement or left in a transaction: never reuse it.
            self._drop()

    async def close(self) -> None:
        """Close the connection and stop opening one."""
        opening, self._opening = self._opening, None
        if opening is not None:
            opening.cancel()
            with contextlib.suppress(BaseException):
                await opening
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.close()
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)

    async def _open(self) -> None:
        conn: Connection | None = None
        try:
            conn = await self._connect()
            await configure_pooled(conn)
        except (psycopg.Error, OSError, RunlaneError):
            # The pool serves meanwhile (and reports what is wrong). Not at every call:
            # a server at its connection limit would see an attempt per statement.
            self._next_opening = time.monotonic() + self._retry_after
            if conn is not None:
                await conn.close()  # opened but not set up: never kept, so never leaked
            return
        finally:
            self._opening = None
        self._conn = conn

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None and not conn.closed:
            task = asyncio.create_task(conn.close())
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)
