"""One way to run statements on any psycopg connection: pooled, or the caller's own.

``trigger(..., connection=conn)`` hands us the caller's connection (sync or
async) inside their transaction; the driver's logic is written once against
:class:`Session` and runs unchanged on either. A sync connection is the caller's
and is used directly: its statements are short and run in the caller's transaction.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Mapping
from contextlib import asynccontextmanager
from typing import Any, Protocol

import psycopg
from psycopg import pq
from psycopg.adapt import AdaptersMap
from psycopg.pq.abc import PGresult
from psycopg.rows import DictRow, dict_row, tuple_row
from psycopg.types.string import TextLoader

from runlane.storage.postgres.bare import (
    BareStatement,
    check_result,
    execute_bare,
    send_prepared,
    statement_lost,
)
from runlane.types.errors import ErrorCode, RunlaneError

Params = Mapping[str, Any]
#: Named statements of the driver, ``{schema}`` filled in.
Queries = Mapping[str, str]


class Session(Protocol):
    """Statements on one connection, rows as dicts."""

    async def fetch(self, query: str, params: Params) -> list[DictRow]:
        """Run one statement; its rows (none for a statement without a result)."""
        ...

    def transaction(self) -> Any:
        """An async context manager: a transaction (or savepoint) around the block."""
        ...


def load_json_as_text(adapters: AdaptersMap) -> None:
    """Hand json/jsonb columns over as text: the shared row codec decodes JSON itself
    (a decoded JSON string would be indistinguishable from JSON text)."""
    for name in ("json", "jsonb"):
        adapters.register_loader(name, TextLoader)


class DriverConnection(psycopg.AsyncConnection[Any]):
    """A connection of the driver's own (its pool's and the spare), which keeps its
    cursors to use again.

    psycopg's ``conn.execute`` makes a cursor for every statement, with its own
    adapters and transformer: about a tenth of a lone trigger's client time. The
    driver runs one statement at a time on a connection and reads each result before
    it sends the next, so kept cursors serve its hot statements (a lone trigger, a
    claim, the statements of a settle-and-claim pipeline); a result stays held until the
    connection's next statement, at most a claim's runs. :meth:`cursors` gives one per
    statement of a pipeline. Other reads (listings) take a cursor of their own
    (:meth:`AsyncSession.fetch`).
    """

    _kept: list[psycopg.AsyncCursor[Any]] | None = None
    #: Names of the bare statements prepared on this connection.
    _bare: set[bytes] | None = None
    _bare_encoding = "utf-8"

    def cursors(self, count: int) -> list[psycopg.AsyncCursor[Any]]:
        """``count`` kept cursors (tuple rows), made on first need."""
        kept = self._kept
        if kept is None:
            kept = self._kept = []
        while len(kept) < count:
            kept.append(self.cursor(row_factory=tuple_row))
        return kept[:count]

    def execute_bare(self, statement: BareStatement, params: Params) -> Awaitable[PGresult]:
        """Run ``statement`` through libpq directly (:mod:`.bare`); its result, to await
        (the call itself hands back :func:`.bare.execute_bare`'s, with no coroutine of
        its own around it)."""
        prepared = self._bare
        if prepared is None:
            prepared = self._bare = set()
            self._bare_encoding = self.info.encoding
        return execute_bare(self.pgconn, self._bare_encoding, prepared, statement, params)

    def send_bare(self, statement: BareStatement, params: Params) -> bool:
        """Send ``statement`` if it is prepared on this connection, its result to be read
        with :func:`.bare.read_result` and checked with :meth:`bare_result`; False,
        sending nothing, if it is not (:meth:`execute_bare` prepares it)."""
        prepared = self._bare
        if prepared is None or statement.name not in prepared:
            return False
        send_prepared(self.pgconn, self._bare_encoding, statement, params)
        return True

    def bare_result(self, statement: BareStatement, result: PGresult) -> bool:
        """Check the result of :meth:`send_bare` (raise its error as a cursor would);
        False when the session lost the prepared statement, which is then forgotten
        (:meth:`execute_bare` prepares it again)."""
        if statement_lost(result):
            if self._bare is not None:
                self._bare.discard(statement.name)
            return False
        check_result(result, self._bare_encoding)
        return True


def column_names(cur: psycopg.AsyncCursor[Any] | psycopg.Cursor[Any]) -> list[str] | None:
    """The names of the current result's columns; ``None`` when the statement returned
    no rows. What ``cur.description`` tells, without the :class:`psycopg.Column` it builds
    per column and call (with a type lookup each: tens of microseconds on a claim)."""
    res = cur.pgresult
    if res is None or not (res.nfields or res.status == pq.ExecStatus.TUPLES_OK):
        return None
    return [(res.fname(i) or b"").decode() for i in range(res.nfields)]


class AsyncSession:
    """A session on an :class:`psycopg.AsyncConnection`.

    ``own`` connections (the pool's) already load JSON as text; on a caller's
    connection each cursor is told to, leaving the connection's adapters alone.
    """

    def __init__(self, conn: psycopg.AsyncConnection[Any], *, own: bool = True) -> None:
        self.conn = conn
        self._own = own

    async def fetch(self, query: str, params: Params) -> list[DictRow]:
        """Run one statement; its rows."""
        # A cursor of its own, closed at once: a listing's rows (payloads and all) are
        # not kept alive by an idle pooled connection until its next statement.
        async with self.conn.cursor(row_factory=dict_row) as cur:
            if not self._own:
                load_json_as_text(cur.adapters)
            await cur.execute(query, params)
            return await cur.fetchall() if column_names(cur) is not None else []

    def transaction(self) -> Any:
        """``conn.transaction()``."""
        return self.conn.transaction()


class SyncSession:
    """A session on the caller's blocking :class:`psycopg.Connection`."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn

    async def fetch(self, query: str, params: Params) -> list[DictRow]:
        """Run one statement; its rows."""
        with self.conn.cursor(row_factory=dict_row) as cur:
            load_json_as_text(cur.adapters)
            cur.execute(query, params)
            return cur.fetchall() if column_names(cur) is not None else []

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[None]:
        """``conn.transaction()``, entered and left around an async block."""
        with self.conn.transaction():
            yield


def caller_session(connection: object) -> tuple[Session, bool]:
    """A session on the caller's connection, and whether to wrap the write in a transaction.

    A connection already in a transaction keeps the write in it (no commit: the
    run exists iff the caller commits). An autocommit connection outside a
    transaction gets one of its own, so the write is still atomic.
    """
    session: Session
    if isinstance(connection, psycopg.AsyncConnection):
        session = AsyncSession(connection, own=False)
    elif isinstance(connection, psycopg.Connection):
        session = SyncSession(connection)
    else:
        raise RunlaneError(
            ErrorCode.CONFIGURATION_INVALID,
            "a PostgreSQL lane enqueues inside a psycopg connection's transaction: pass a "
            f"psycopg.Connection or psycopg.AsyncConnection, not {type(connection).__name__}.",
        )
    if connection.closed:
        raise RunlaneError(
            ErrorCode.CONFIGURATION_INVALID, "the connection passed to trigger is closed."
        )
    status = connection.info.transaction_status
    if status == pq.TransactionStatus.INERROR:
        raise RunlaneError(
            ErrorCode.CONFIGURATION_INVALID,
            "the connection's transaction has already failed; roll it back before triggering.",
        )
    if status == pq.TransactionStatus.ACTIVE:
        raise RunlaneError(
            ErrorCode.CONFIGURATION_INVALID,
            "the connection passed to trigger is busy running another statement.",
        )
    return session, bool(connection.autocommit) and status == pq.TransactionStatus.IDLE
