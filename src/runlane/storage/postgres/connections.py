"""Connections: settings, the pool's per-connection setup and cheap health check, the
spare connection a lone caller uses instead of the pool, and :class:`PostgresConnection`,
which runs each operation of the driver on one of them (the role ``SqliteConnection``
plays for SQLite)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import select
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, TypeVar

import psycopg
from psycopg import errors as pg_errors
from psycopg.conninfo import conninfo_to_dict
from psycopg.pq import TransactionStatus
from psycopg.pq.abc import PGresult
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from runlane.storage.postgres.bare import BareStatement, read_result
from runlane.storage.postgres.errors import ConnectionTarget
from runlane.storage.postgres.sessions import (
    AsyncSession,
    DriverConnection,
    Params,
    load_json_as_text,
)
from runlane.types.errors import ErrorCode, RunlaneError

T = TypeVar("T")
Connection = DriverConnection
logger = logging.getLogger("runlane.postgres")

DEFAULT_APPLICATION_NAME = "runlane"
DEFAULT_MIN_SIZE = 1
DEFAULT_MAX_SIZE = 10
#: Seconds to establish a connection before the server counts as unreachable.
DEFAULT_CONNECT_TIMEOUT = 5.0
#: Seconds an operation waits for a pooled connection before STORAGE_UNAVAILABLE.
DEFAULT_POOL_TIMEOUT = 5.0
#: A transaction aborted by a deadlock or serialization failure, or an operation whose
#: connection the server closed under it, is tried this often.
MAX_CONFLICT_ATTEMPTS = 3
#: SQLSTATEs of a connection the server ended: terminated by an administrator
#: (``pg_terminate_backend``), a crash or a shutdown of the server.
LOST_CONNECTION_SQLSTATES = frozenset({"57P01", "57P02", "57P03"})
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
    """Check a pooled connection before use, without a round trip in the common case;
    raise if it is gone.

    An idle connection has nothing to read. If its socket is readable, the server
    sent something (typically "terminating connection" before a restart) or hung
    up: ask it properly. So after a server restart, or backends terminated, stale
    connections are dropped before anyone uses them.

    :meth:`PostgresConnection.run` calls it, not the pool: the pool waits a second
    (then two, four...) after each failed check before it hands out the next
    connection, which with every connection terminated at once would outlast the
    pool timeout; the driver closes the dead one and takes the next at once.
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
        #: A poll object with the kept connection's socket registered: the check before
        #: each call polls it, rather than building one per call (None: no poll here).
        self._poller: Any = None
        self._busy = False
        self._opening: asyncio.Task[None] | None = None
        self._next_opening = 0.0
        self._closing: set[asyncio.Task[None]] = set()

    def take(self) -> Connection | None:
        """The connection, now marked busy; ``None`` when busy or not (yet) usable."""
        if self._busy:
            return None
        conn = self._conn
        if conn is None or conn.closed or conn.broken or self._readable(conn):
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

    def _readable(self, conn: Connection) -> bool:
        poller = self._poller
        if poller is None:
            return socket_readable(conn.pgconn.socket)
        return bool(poller.poll(0))

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
        poll = getattr(select, "poll", None)
        if poll is not None:
            self._poller = poll()
            self._poller.register(conn.pgconn.socket, select.POLLIN)
        self._conn = conn

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        self._poller = None
        if conn is not None and not conn.closed:
            task = asyncio.create_task(conn.close())
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)


def lost(error: psycopg.Error) -> bool:
    """Whether ``error`` says the connection is gone (the server ended it or the socket
    broke), rather than that the statement failed."""
    if error.sqlstate is not None:
        return error.sqlstate in LOST_CONNECTION_SQLSTATES or error.sqlstate.startswith("08")
    return isinstance(error, psycopg.OperationalError | psycopg.InterfaceError)


class PostgresConnection:
    """The driver's connections to one server: a pool, the spare connection beside it,
    and fresh connections for migrating, listening and diagnosing.

    :meth:`run` runs each operation of the driver on one of them and turns what
    psycopg raises into a :class:`RunlaneError`.
    """

    def __init__(
        self,
        dsn: str,
        *,
        schema: str,
        min_size: int,
        max_size: int,
        application_name: str | None,
        connect_timeout: float,
        pool_timeout: float,
    ) -> None:
        self.target = ConnectionTarget.from_dsn(dsn)
        check_options(schema, min_size, max_size, connect_timeout, pool_timeout)
        self._schema = schema
        self._dsn = dsn
        self._min_size = min_size
        self._max_size = max_size
        self._pool_timeout = float(pool_timeout)
        self._connect_kwargs = connect_kwargs(dsn, application_name, connect_timeout)
        self.pool: AsyncConnectionPool[Connection] | None = None
        self.spare: SpareConnection | None = None

    @property
    def is_open(self) -> bool:
        """Whether :meth:`open_pool` ran and :meth:`close` has not since."""
        return self.pool is not None

    async def open_pool(self) -> None:
        """Open the pool (it fills in the background) and the spare connection."""
        pool: AsyncConnectionPool[Connection] = AsyncConnectionPool(
            self._dsn,
            kwargs=self._pooled_kwargs(),
            connection_class=DriverConnection,
            min_size=self._min_size,
            max_size=self._max_size,
            timeout=self._pool_timeout,
            configure=configure_pooled,
            name=f"runlane-{self._schema}",
            open=False,
        )
        await pool.open(wait=False)
        self.pool = pool
        self.spare = SpareConnection(self._connect_spare)

    async def close(self) -> None:
        """Close the spare connection and the pool."""
        spare, self.spare = self.spare, None
        if spare is not None:
            await spare.close()
        pool, self.pool = self.pool, None
        if pool is not None:
            await pool.close()

    def error(self, error: BaseException) -> RunlaneError:
        """``error`` as the typed error operators are shown (never the password)."""
        return self.target.error(error, schema=self._schema)

    async def connect(self) -> psycopg.AsyncConnection[Any]:
        """A fresh connection outside the pool (STORAGE_UNAVAILABLE when it fails)."""
        try:
            return await psycopg.AsyncConnection.connect(self._dsn, **self._connect_kwargs)
        except psycopg.Error as error:
            raise self.error(error) from None

    async def connect_listener(self) -> psycopg.AsyncConnection[Any]:
        """A fresh connection set up for LISTEN and session advisory locks."""
        return await psycopg.AsyncConnection.connect(
            self._dsn, **{**self._connect_kwargs, **LISTENER_OPTIONS}
        )

    def _pooled_kwargs(self) -> dict[str, Any]:
        """Connection options of the pool's connections and the spare (autocommit)."""
        return {**self._connect_kwargs, "autocommit": True}

    async def _connect_spare(self) -> Connection:
        return await DriverConnection.connect(self._dsn, **self._pooled_kwargs())

    async def run(
        self,
        op: Callable[[Connection], Awaitable[T]],
        *,
        retry: bool = True,
        replay: bool = True,
        tried: int = 0,
    ) -> T:
        """Run ``op`` on the spare connection when it is free, else on a pooled one (both
        autocommit), retrying aborted conflicts unless ``retry`` is false, and running it
        again on another connection when the server ended its connection under it unless
        ``replay`` is false.

        ``op`` is one statement or one transaction, so a deadlock or serialization
        failure rolled all of it back and it is safe to run again (when what it sends
        can be sent again: a consumed iterator cannot). A lost connection leaves unknown
        whether ``op`` committed: it is run again only when running it twice is
        harmless (the compare-and-set transitions, heartbeats, claims, reads and
        maintenance statements: a second run finds the first one's effect and changes
        nothing, or at worst leaves runs claimed for a lease). Creating runs and
        publishing pass ``replay=False``: the caller gets STORAGE_UNAVAILABLE.
        ``tried``: attempts the caller made already (:meth:`run_bare`).
        """
        pool = self.pool
        if pool is None:
            raise RunlaneError(
                ErrorCode.STORAGE_UNAVAILABLE,
                "PostgreSQL storage is not open.",
                meta={"open": False},
                retryable=True,
            )
        spare = self.spare
        for attempt in range(tried + 1, MAX_CONFLICT_ATTEMPTS + 1):
            try:
                own = spare.take() if spare is not None and attempt == 1 else None
                if spare is not None and own is not None:
                    try:
                        return await op(own)
                    finally:
                        spare.give_back(own)
                for _ in range(self._max_size + 1):
                    async with pool.connection() as conn:
                        try:
                            await check_pooled(conn)
                        except psycopg.Error:
                            # Closed, it goes back to the pool, which drops it and
                            # opens another in its place; the next one is taken now.
                            await conn.close()
                            continue
                        return await op(conn)
                # Every connection was dead: the last one (or the pool's wait) decides.
                async with pool.connection() as conn:
                    return await op(conn)
            except (pg_errors.DeadlockDetected, pg_errors.SerializationFailure) as error:
                if attempt == MAX_CONFLICT_ATTEMPTS or not retry:
                    raise self.error(error) from None
            except PoolTimeout as error:
                raise await self._diagnose(error) from None
            except psycopg.Error as error:
                # The pool and the spare drop a broken connection; the next attempt takes
                # a live one from the pool, which waits for the server up to pool_timeout.
                if not (replay and retry and attempt < MAX_CONFLICT_ATTEMPTS and lost(error)):
                    raise self.error(error) from None
                logger.info("connection lost under a statement (%s); running it again", error)
        raise AssertionError("unreachable")

    async def run_bare(self, statement: BareStatement, params: Params) -> PGresult:
        """:meth:`run` of :meth:`~.sessions.DriverConnection.execute_bare` with
        ``replay=False``, in fewer steps on the spare connection when it is free and has
        the statement prepared (a lone trigger's every call but the first): sent and
        read right here, with no operation, attempt loop or coroutine in between."""
        spare = self.spare
        conn = spare.take() if spare is not None else None
        if spare is None or conn is None:
            return await self.run(partial(_execute_bare, statement, params), replay=False)
        try:
            if conn.send_bare(statement, params):
                result = await read_result(conn.pgconn)
                if conn.bare_result(statement, result):
                    return result
            return await conn.execute_bare(statement, params)
        except (pg_errors.DeadlockDetected, pg_errors.SerializationFailure):
            pass  # the first of run's attempts: the others follow below
        except psycopg.Error as error:
            raise self.error(error) from None
        finally:
            spare.give_back(conn)
        return await self.run(partial(_execute_bare, statement, params), replay=False, tried=1)

    async def _diagnose(self, exhausted: PoolTimeout) -> RunlaneError:
        """Why no pooled connection came: the server's answer to a fresh connection
        (refused credentials, dropped database, unreachable), or a busy pool."""
        try:
            conn = await self.connect()
        except RunlaneError as error:
            return error
        await conn.close()
        return self.error(exhausted)


def _execute_bare(
    statement: BareStatement, params: Params, conn: Connection
) -> Awaitable[PGresult]:
    return conn.execute_bare(statement, params)


async def fetch_rows(query: str, params: dict[str, Any], conn: Connection) -> list[Any]:
    """The rows ``query`` returns (an operation for :meth:`PostgresConnection.run`)."""
    return await AsyncSession(conn).fetch(query, params)


async def count_rows(query: str, params: dict[str, Any], conn: Connection) -> int:
    """How many rows ``query`` changed (an operation for :meth:`PostgresConnection.run`)."""
    cur = conn.cursors(1)[0]
    await cur.execute(query, params)
    return max(cur.rowcount, 0)


async def execute(query: str, params: dict[str, Any], conn: Connection) -> None:
    """Run ``query`` for its effect (an operation for :meth:`PostgresConnection.run`)."""
    await conn.cursors(1)[0].execute(query, params)
