"""One SQLite connection, used by one operation at a time, inline first.

One connection per storage object, used by one operation at a time. Operations
first run inline on the event loop with a zero busy timeout: an uncontended
SQLite write takes microseconds, far less than a hop to a thread. Only when
another process holds the write lock does the operation move to a dedicated
thread that waits up to ``busy_timeout`` for it, so the loop never blocks on
another process. Readers never block in WAL mode.

At ``synchronous=FULL`` (or EXTRA) every commit waits for the disk to sync the WAL
file, which takes far longer than the writes before it. A busy worker's settles
(and the claims riding on them) are then written inline and committed in the
thread, which holds no GIL while the disk syncs: the loop
runs attempts meanwhile, and the settles they finish go together in the next,
larger, commit.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from runlane.types.errors import ErrorCode, RunlaneError

T = TypeVar("T")

#: Milliseconds an operation moved to the thread waits for another process's write lock.
DEFAULT_BUSY_TIMEOUT_MS = 30_000

_BUSY_CODES = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED})

#: Longest the loop waits (seconds) for the thread to begin a commit handed to it.
COMMIT_START_WAIT = 0.05

#: ``PRAGMA synchronous`` settings at which every commit syncs the WAL file to disk.
_SYNCED_COMMITS = frozenset({"FULL", "EXTRA", "2", "3"})


def _unchanged(value: None) -> None:
    return value


def bind_none_directly() -> None:
    """Register an identity adapter for ``None`` unless one is registered already.

    CPython's ``sqlite3`` runs every parameter that is not an exact int, float, str
    or bytearray through its adapter lookup. For ``None``, with no adapter registered,
    that lookup raises and clears an ``AttributeError`` on its way: about 3,000
    instructions for each ``None`` bound, and a settle binds eight. With an adapter
    registered it is a dictionary hit. The value bound stays ``None`` (NULL), for this
    driver and for any other user of the module's shared adapter registry.
    """
    if (type(None), sqlite3.PrepareProtocol) not in getattr(sqlite3, "adapters", {}):
        sqlite3.register_adapter(type(None), _unchanged)


class _Busy(Exception):
    """Another connection holds the write lock; retry where waiting is allowed."""


class SqliteConnection:
    """The storage's connection to one file and the thread that waits for its write lock."""

    def __init__(self, path: str, *, busy_timeout_ms: int, synchronous: str) -> None:
        self.path = path
        self._busy_timeout_ms = busy_timeout_ms
        self._synchronous = synchronous
        #: Whether each commit waits for the disk (FULL, EXTRA): the commits of
        #: overlapping transactions are then made in the thread (see transact).
        self._commit_off_loop = synchronous.strip().upper() in _SYNCED_COMMITS
        self._conn: sqlite3.Connection | None = None
        self._lock: asyncio.Lock | None = None
        self._patient = False
        self._executor: ThreadPoolExecutor | None = None

    # -- lifecycle -----------------------------------------------------------------

    async def connect(self) -> bool:
        """Start the thread and open the file, once; ``False`` if that was done before."""
        if self._executor is not None:
            return False
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="runlane-sqlite")
        await self.run(self._connect)
        return True

    async def close(self) -> None:
        """Close the connection and its thread."""
        executor, self._executor = self._executor, None
        if executor is None:
            return
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(executor, self._disconnect)
        executor.shutdown(wait=True)

    def _connect(self) -> None:
        bind_none_directly()
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        try:
            conn = sqlite3.connect(
                self.path,
                isolation_level=None,
                check_same_thread=False,
                timeout=self._busy_timeout_ms / 1000,
            )
            conn.row_factory = sqlite3.Row
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute(f"PRAGMA synchronous = {self._synchronous}")
            conn.execute("PRAGMA busy_timeout = 0")
        except sqlite3.Error as error:
            raise _unavailable(error, self.path) from error
        self._conn = conn

    def _disconnect(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    # -- operations ----------------------------------------------------------------

    async def run(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` inline; if the write lock is taken, in the thread, waiting for it."""
        executor = self._running()
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._conn is not None:
                try:
                    return fn()
                except _Busy:
                    pass
            return await asyncio.get_running_loop().run_in_executor(
                executor, self._run_patiently, fn
            )

    async def transact(self, fn: Callable[[sqlite3.Cursor], T], *, overlap: bool = False) -> T:
        """Run ``fn`` in one IMMEDIATE transaction, as :meth:`run` runs operations.

        ``overlap``: the loop has other work meanwhile (a busy worker's settles). When
        commits wait for the disk, ``fn`` then still runs inline but its commit is made
        in the thread: the loop goes on while the WAL file syncs, and the connection is
        not used again until the commit has ended. A lone operation commits inline:
        nothing would run meanwhile, and while its commit is in the thread another
        connection to the file (in this process too) would find the write lock taken
        and wait for it in SQLite's busy handler, which sleeps.
        """

        def step() -> T:
            with self.transaction() as cur:
                return fn(cur)

        if not (overlap and self._commit_off_loop):
            return await self.run(step)
        executor = self._running()
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            conn = self._conn
            if conn is not None:
                try:
                    result = self._write_uncommitted(conn, fn)
                except _Busy:
                    pass
                else:
                    started = threading.Event()
                    committed = asyncio.get_running_loop().run_in_executor(
                        executor, self._commit, conn, started
                    )
                    # Give the thread the GIL until it is inside the commit: the write lock
                    # is held until the commit ends, so it must not wait for the loop's
                    # next pause to begin.
                    started.wait(COMMIT_START_WAIT)
                    await _outlive_cancellation(committed)
                    return result
            return await asyncio.get_running_loop().run_in_executor(
                executor, self._run_patiently, step
            )

    def _write_uncommitted(self, conn: sqlite3.Connection, fn: Callable[[sqlite3.Cursor], T]) -> T:
        """``fn`` in a new IMMEDIATE transaction, left open for :meth:`_commit`."""
        cur = conn.cursor()
        try:
            cur.execute("BEGIN IMMEDIATE")
            return fn(cur)
        except BaseException as error:
            if conn.in_transaction:
                conn.rollback()
            self._raise_storage_error(error)
            raise
        finally:
            cur.close()

    def _commit(self, conn: sqlite3.Connection, started: threading.Event) -> None:
        """Commit the open transaction (in the thread: the GIL is free while it syncs)."""
        started.set()
        try:
            conn.execute("COMMIT")
        except BaseException as error:
            if conn.in_transaction:
                conn.rollback()
            self._raise_storage_error(error, busy=False)
            raise

    async def fetch(self, query: str, params: dict[str, Any]) -> list[sqlite3.Row]:
        """The rows of one read, outside any transaction."""
        return await self.run(lambda: self._read(query, params))

    async def write_count(self, query: str, params: dict[str, Any]) -> int:
        """Run one write in its own transaction; how many rows it changed."""
        return await self.transact(lambda cur: cur.execute(query, params).rowcount)

    def write_one(self, sql: str, params: Sequence[Any]) -> None:
        """Run one write statement as its own transaction (autocommit).

        A write statement starts a write transaction as it begins, as ``BEGIN
        IMMEDIATE`` does, and commits as it ends: one statement instead of three for
        a write that is a single statement (a lone trigger's insert).
        """
        try:
            self._require().execute(sql, params)
        except sqlite3.OperationalError as error:
            self._raise_storage_error(error)
            raise

    @contextmanager
    def transaction(self, conn: sqlite3.Connection | None = None) -> Iterator[sqlite3.Cursor]:
        """A cursor in a new IMMEDIATE transaction, or in ``conn``'s open one (the
        caller's) under a savepoint: a call that fails there leaves none of its own
        writes behind, and the caller's transaction goes on."""
        own = conn is None
        conn = conn or self._require()
        nested = not own and conn.in_transaction
        cur = conn.cursor()
        if not own:
            # Rows read by name, as on our own connections (the caller's has its own).
            cur.row_factory = sqlite3.Row
        try:
            if own:
                cur.execute("BEGIN IMMEDIATE")
            elif nested:
                cur.execute("SAVEPOINT runlane_write")
            yield cur
            if own:
                cur.execute("COMMIT")
            elif nested:
                cur.execute("RELEASE runlane_write")
        except BaseException as error:
            if own and conn.in_transaction:
                conn.rollback()
            elif nested and conn.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    cur.execute("ROLLBACK TO runlane_write")
                    cur.execute("RELEASE runlane_write")
            self._raise_storage_error(error)
            raise
        finally:
            cur.close()

    def _raise_storage_error(self, error: BaseException, *, busy: bool = True) -> None:
        """Raise what storage raises for SQLite's ``error``: ``_Busy`` (when ``busy``
        and waiting is allowed elsewhere) or ``STORAGE_UNAVAILABLE``; other errors are
        left to the caller to re-raise."""
        if isinstance(error, sqlite3.OperationalError):
            if busy:
                self._check_busy(error)
            raise _unavailable(error, self.path) from error

    def _running(self) -> ThreadPoolExecutor:
        executor = self._executor
        if executor is None:
            raise _not_open()
        return executor

    def _require(self) -> sqlite3.Connection:
        if self._conn is None:
            raise _not_open()
        return self._conn

    def _run_patiently(self, fn: Callable[[], T]) -> T:
        conn = self._conn
        if conn is None:
            return fn()  # opening: nothing to wait for yet
        conn.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout_ms)}")
        self._patient = True
        try:
            return fn()
        finally:
            self._patient = False
            conn.execute("PRAGMA busy_timeout = 0")

    def _check_busy(self, error: sqlite3.Error) -> None:
        if not self._patient and getattr(error, "sqlite_errorcode", None) in _BUSY_CODES:
            raise _Busy from error

    def _read(self, query: str, params: dict[str, Any]) -> list[sqlite3.Row]:
        try:
            return self._require().execute(query, params).fetchall()
        except sqlite3.OperationalError as error:
            self._raise_storage_error(error)
            raise


async def _outlive_cancellation(future: asyncio.Future[None]) -> None:
    """Wait for ``future``; if cancelled meanwhile, still wait for it, then re-raise.

    The caller holds the connection's lock: it must not let another operation use
    the connection while a commit is still under way in the thread.
    """
    cancelled: asyncio.CancelledError | None = None
    while not future.done():
        try:
            await asyncio.shield(future)
        except asyncio.CancelledError as error:
            cancelled = error
    if cancelled is not None:
        raise cancelled
    future.result()


def _not_open() -> RunlaneError:
    return RunlaneError(
        ErrorCode.STORAGE_UNAVAILABLE,
        "SQLite storage is not open.",
        meta={"open": False},
        retryable=True,
    )


def _unavailable(error: sqlite3.Error, path: str) -> RunlaneError:
    return RunlaneError(
        ErrorCode.STORAGE_UNAVAILABLE,
        "The SQLite database could not be used; check the path, permissions and disk space.",
        meta={
            "path": path,
            "driver_error": str(error),
            "sqlite_code": getattr(error, "sqlite_errorname", None),
        },
        retryable=True,
    )
