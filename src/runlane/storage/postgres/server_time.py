"""The server's time: what a PostgreSQL lane's runtime runs on (SPEC-flow 10).

Many hosts share one server, and their clocks drift: a worker whose clock runs
ten minutes fast would see healthy workers' leases as expired, and start delayed
runs and schedule slots early. So the runtime's clock is the server's. It is read
when the storage opens (on the connection that checks the schema version) and
every :data:`REREAD_EVERY` seconds after, and runs on the host's monotonic clock
in between (:class:`~runlane.types.clock.ServerClock`). A re-read that fails (the
server is restarting) keeps the reading it has, which stays as good as it was.

Why a read clock rather than SQL ``now()`` in every statement: every statement
already takes "now" as a parameter, and the engine computes deadlines from it
(lease expiry, retry and release times, reservation windows), so one clock keeps
the statements as they are, the same on both drivers, and keeps an explicit test
clock (``Runlane(clock=ManualClock())``) in charge of all of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg

from runlane.types.clock import ClockReading, ServerClock

logger = logging.getLogger("runlane.postgres")

#: Runs an operation on a pooled connection (``PostgresConnection.run``).
RunOperation = Callable[
    [Callable[[Any], Awaitable[list[ClockReading]]]], Awaitable[list[ClockReading]]
]

#: Readings per read; the one with the shortest round trip is kept.
READINGS = 3
#: Seconds between reads while the storage is open.
REREAD_EVERY = 60.0
#: A host clock further than this many seconds from the server's is warned about.
SKEW_WARNING = 2.0


async def read_clock(conn: psycopg.AsyncConnection[Any]) -> list[ClockReading]:
    """:data:`READINGS` readings of the server's clock on ``conn``."""
    readings = []
    async with conn.cursor() as cur:
        for _ in range(READINGS):
            sent = time.monotonic()
            await cur.execute("SELECT clock_timestamp()")
            row = await cur.fetchone()
            received = time.monotonic()
            assert row is not None
            readings.append(ClockReading(sent, received, row[0]))
    return readings


class ServerTime:
    """Keeps a :class:`ServerClock` read while the storage is open, and warns when the
    host's clock is off the server's by more than :data:`SKEW_WARNING` seconds."""

    def __init__(self, location: str) -> None:
        self.clock = ServerClock()
        self._location = location
        self._task: asyncio.Task[None] | None = None
        #: The offset last warned about (None: the host's clock was last found fine).
        self._warned: float | None = None

    async def read(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """Read the server's clock on ``conn`` now."""
        self.clock.update(await read_clock(conn))
        self._check_skew()

    def keep_read(self, run: RunOperation) -> None:
        """Read again every :data:`REREAD_EVERY` seconds through ``run`` (which runs an
        operation on a pooled connection) until :meth:`stop`."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._reread(run))

    async def stop(self) -> None:
        """Stop reading (the clock keeps running on its last reading)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _reread(self, run: RunOperation) -> None:
        while True:
            await asyncio.sleep(REREAD_EVERY)
            try:
                self.clock.update(await run(read_clock))
            except Exception as error:
                # The reading in use stays as good as it was: only drift accrues.
                logger.info(
                    "reading the server's clock failed (%s); keeping the last reading", error
                )
                continue
            self._check_skew()

    def _check_skew(self) -> None:
        offset = self.clock.offset
        if offset is None:
            return
        if abs(offset) <= SKEW_WARNING:
            self._warned = None
            return
        if self._warned is not None and abs(offset - self._warned) <= SKEW_WARNING:
            return
        self._warned = offset
        logger.warning(
            "this host's clock is %.1f s %s the database server's (%s); runlane runs on "
            "the server's time, but other software on this host does not: fix its clock "
            "(NTP)",
            abs(offset),
            "behind" if offset > 0 else "ahead of",
            self._location,
            extra={"event": "clock.skew", "offset_seconds": round(offset, 3)},
        )
