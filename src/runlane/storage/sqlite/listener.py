"""Cross-process wakeups on SQLite: one watcher per storage wakes idle workers at a commit.

SQLite has no LISTEN/NOTIFY, but in WAL mode every commit, from any connection or
process, appends to the database's ``-wal`` file. The watcher learns of that at once:

* on Linux through inotify on the ``-wal`` file: the kernel tells us, so an idle
  worker spends no CPU on waiting;
* elsewhere (or when inotify is unavailable) by reading ``PRAGMA data_version`` on a
  dedicated connection: it changes whenever another connection commits and is read
  from shared memory, not the disk. It is read every 2 ms for 250 ms after a
  change, then ever less often, down to every 100 ms while nothing happens.

The hint is coarse: any commit wakes, including other environments' triggers and
settles of this very process. A worker woken for nothing makes one empty claim,
which writes nothing and so wakes nobody else. It is only a hint: workers still poll
on their interval, which also covers writers the watcher cannot see.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import sqlite3
import struct
import sys
from typing import Any

from runlane.storage.sql.wakeups import wait_for_announcement

logger = logging.getLogger("runlane.sqlite")

_IN_MODIFY = 0x00000002
_IN_DELETE_SELF = 0x00000400
_IN_MOVE_SELF = 0x00000800
_IN_IGNORED = 0x00008000
_WATCH = _IN_MODIFY | _IN_DELETE_SELF | _IN_MOVE_SELF
_GONE = _IN_DELETE_SELF | _IN_MOVE_SELF | _IN_IGNORED
_EVENT_HEADER = struct.Struct("iIII")

#: ``PRAGMA data_version`` checks: this often right after a change, for this long,
_FAST_CHECK = 0.002
_FAST_FOR = 0.25
#: then backing off (doubling) to this interval while nothing changes.
_SLOW_CHECK = 0.1


def _libc_inotify() -> Any | None:
    """libc when it has inotify (Linux), else None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.inotify_init1  # noqa: B018 - probe that the symbol exists
        libc.inotify_add_watch  # noqa: B018
    except (OSError, AttributeError):
        return None
    return libc


class WorkListener:
    """Wakes waiters whenever a commit reaches the SQLite file at ``path``."""

    def __init__(self, path: str, *, inotify: bool = True) -> None:
        self._path = path
        self._wal = f"{path}-wal"
        self._use_inotify = inotify
        self._fd: int | None = None
        self._poller: asyncio.Task[None] | None = None
        self._pending: dict[str, asyncio.Event] = {}
        #: Bumped whenever watching stops, so waiters woken by the loss say "no news".
        self._generation = 0

    @property
    def listening(self) -> bool:
        """Whether commits are being watched."""
        return self._fd is not None or (self._poller is not None and not self._poller.done())

    @property
    def method(self) -> str | None:
        """``"inotify"``, ``"data_version"``, or None when not watching."""
        if self._fd is not None:
            return "inotify"
        return "data_version" if self.listening else None

    async def wait(self, environment: str, within: float) -> bool:
        """True once a commit was seen (maybe before this call); False after ``within``
        seconds or when commits may have been missed.

        Right after watching starts it returns True at once: a commit made before
        then is invisible to it, so the caller should look once more.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(within, 0.0)
        event = self._pending.setdefault(environment, asyncio.Event())
        if not self.listening:
            if not self._start(loop):
                await asyncio.sleep(max(deadline - loop.time(), 0.0))
                return False
            return True
        return await wait_for_announcement(event, deadline, lambda: self._generation)

    async def close(self) -> None:
        """Stop watching."""
        self._stop_inotify()
        poller, self._poller = self._poller, None
        if poller is not None:
            poller.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await poller

    # -- starting ------------------------------------------------------------------

    def _start(self, loop: asyncio.AbstractEventLoop) -> bool:
        if self._path == ":memory:" or self._path.startswith("file::memory:"):
            return False  # no other process can write to it
        for event in self._pending.values():
            event.clear()
        if self._use_inotify and self._start_inotify(loop):
            return True
        try:
            conn = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA busy_timeout = 0")
            version = _data_version(conn)
        except sqlite3.Error as error:
            logger.warning("commit watching unavailable (%s); polling", error)
            return False
        self._poller = loop.create_task(self._poll(conn, version))
        return True

    def _start_inotify(self, loop: asyncio.AbstractEventLoop) -> bool:
        libc = _libc_inotify()
        if libc is None or not os.path.exists(self._wal):
            return False
        fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            logger.debug("inotify_init1 failed (errno %s)", ctypes.get_errno())
            return False
        if libc.inotify_add_watch(fd, os.fsencode(self._wal), _WATCH) < 0:
            logger.debug("inotify_add_watch failed (errno %s)", ctypes.get_errno())
            os.close(fd)
            return False
        self._fd = fd
        loop.add_reader(fd, self._on_inotify, loop)
        return True

    # -- watching ------------------------------------------------------------------

    def _on_inotify(self, loop: asyncio.AbstractEventLoop) -> None:
        fd = self._fd
        if fd is None:
            return
        mask = 0
        with contextlib.suppress(BlockingIOError, InterruptedError):
            while True:
                data = os.read(fd, 4096)
                if not data:
                    break
                offset = 0
                while offset + _EVENT_HEADER.size <= len(data):
                    _, event_mask, _, length = _EVENT_HEADER.unpack_from(data, offset)
                    mask |= event_mask
                    offset += _EVENT_HEADER.size + length
        if mask & _GONE:
            # The log was removed (the last other connection closed it): watch afresh
            # at the next wait, and let waiters poll once meanwhile.
            self._stop_inotify()
            return
        self._wake()

    def _stop_inotify(self) -> None:
        fd, self._fd = self._fd, None
        if fd is None:
            return
        with contextlib.suppress(RuntimeError):  # the loop may be closed already
            asyncio.get_running_loop().remove_reader(fd)
        os.close(fd)
        self._lost()

    async def _poll(self, conn: sqlite3.Connection, version: int) -> None:
        loop = asyncio.get_running_loop()
        interval = _FAST_CHECK
        changed_at = loop.time()
        try:
            while True:
                await asyncio.sleep(interval)
                try:
                    current = _data_version(conn)
                except sqlite3.OperationalError as error:
                    if error.sqlite_errorcode not in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
                        raise
                    continue  # a checkpoint or recovery is under way: look next time
                if current != version:
                    version = current
                    changed_at = loop.time()
                    interval = _FAST_CHECK
                    self._wake()
                elif loop.time() - changed_at > _FAST_FOR:
                    interval = min(interval * 2, _SLOW_CHECK)
        except sqlite3.Error as error:
            logger.warning("commit watching stopped (%s); polling", error)
        finally:
            conn.close()
            self._lost()

    def _wake(self) -> None:
        for event in self._pending.values():
            event.set()

    def _lost(self) -> None:
        self._generation += 1
        self._wake()


def _data_version(conn: sqlite3.Connection) -> int:
    row = conn.execute("PRAGMA data_version").fetchone()
    return int(row[0])
