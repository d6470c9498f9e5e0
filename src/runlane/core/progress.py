"""Storing what tasks report through ``ctx.progress``: coalesced per attempt, written
in groups for the whole runtime, the last value with the attempt's settle.

Each attempt holds an :class:`AttemptProgress`. It keeps only the latest report and
writes at most one value a second (:data:`PROGRESS_INTERVAL`): a task may report in a
tight loop and costs no more than a write a second. The first value waits one interval
after the first report, so an attempt that reports for less than that writes nothing
of its own: its last value rides on the transition that settles it
(:meth:`AttemptProgress.end`, ``Transition.progress``), in the settle's
transaction, and costs no round trip of its own.

The writes made while attempts run go through the runtime's :class:`ProgressWriter`,
which writes whatever is pending in one storage call while the previous call is in
flight (as the settle batcher does). Storage fences each value with the attempt's
lease token (a settle's value, with the settle's compare-and-set), so a worker that
lost its lease overwrites nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence

from runlane.core.store import StoreScope
from runlane.model.progress import ProgressReport
from runlane.types.errors import RunlaneError
from runlane.types.records import ProgressWrite
from runlane.types.runs import Run

logger = logging.getLogger("runlane.worker")

#: At most one stored value per run this often (seconds).
PROGRESS_INTERVAL = 1.0
#: Most values written in one storage call.
MAX_PROGRESS_BATCH = 500


class ProgressWriter:
    """Writes attempts' latest progress, grouping what arrives while a write is in flight."""

    def __init__(self, store: StoreScope) -> None:
        """Write into ``store``."""
        self._store = store
        self._pending: dict[str, ProgressWrite] = {}
        #: Resolved when the pending values are written (True) or their write failed.
        self._next: asyncio.Future[bool] | None = None
        self._flushing: asyncio.Task[None] | None = None

    def submit(self, write: ProgressWrite) -> asyncio.Future[bool]:
        """Write ``write`` soon (replacing a pending value of the same run); the future
        resolves once it was written or dropped by the fence (True), or its write
        failed (False)."""
        self._pending[write.run_id] = write
        if self._next is None:
            self._next = asyncio.get_running_loop().create_future()
        future = self._next
        if self._flushing is None or self._flushing.done():
            self._flushing = asyncio.ensure_future(self._flush())
        return future

    async def _flush(self) -> None:
        while self._pending:
            batch, self._pending = list(self._pending.values()), {}
            done, self._next = self._next, None
            written = False
            try:
                parts = range(0, len(batch), MAX_PROGRESS_BATCH)
                stored = [await self._write(batch[i : i + MAX_PROGRESS_BATCH]) for i in parts]
                written = all(stored)
            finally:
                if done is not None and not done.done():
                    done.set_result(written)

    async def _write(self, batch: Sequence[ProgressWrite]) -> bool:
        store = self._store
        try:
            await store.storage.write_progress(store.environment, batch, store.now())
        except RunlaneError as error:
            # Progress is advice to operators: losing one value never fails an attempt.
            logger.warning("progress of %d runs not stored: %s", len(batch), error)
            return False
        return True


class AttemptProgress:
    """One attempt's reports: the latest value, written at most once a second while
    the attempt runs, and the last one handed to the attempt's settle."""

    __slots__ = (
        "_latest",
        "_loop",
        "_run",
        "_submitted",
        "_timer",
        "_writer",
        "_written",
        "_written_at",
    )

    def __init__(self, writer: ProgressWriter, run: Run) -> None:
        """Report for the attempt ``run`` is leased for, through ``writer``."""
        assert run.lease is not None
        # Built for every attempt, reporting or not: no clock is read before a report.
        self._writer = writer
        self._run = run
        self._loop = asyncio.get_running_loop()
        #: Loop time of the last write; the first report counts as one, so an attempt
        #: that reports for less than the interval writes only with its settle.
        self._written_at: float | None = None
        self._latest: ProgressReport | None = None
        self._timer: asyncio.TimerHandle | None = None
        #: The report last handed to the writer, and its write.
        self._submitted: ProgressReport | None = None
        self._written: asyncio.Future[bool] | None = None

    @property
    def reported(self) -> bool:
        """Whether the task reported anything in this attempt."""
        return self._latest is not None

    def offer(self, report: ProgressReport) -> None:
        """Keep ``report`` as the latest value; write it within the interval."""
        self._latest = report
        if self._timer is None:
            loop = self._loop
            written_at = self._written_at
            if written_at is None:
                written_at = self._written_at = loop.time()
            self._timer = loop.call_at(written_at + PROGRESS_INTERVAL, self._write_latest)

    def offer_threadsafe(self, report: ProgressReport) -> None:
        """:meth:`offer` from a sync task's thread."""
        # A thread that outlived its attempt (past its time limit) may report after the
        # loop closed: nothing is left to store it for.
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self.offer, report)

    async def end(self) -> ProgressWrite | None:
        """Stop writing, once the handler is done: the last report, for the attempt's
        settle to store (its compare-and-set fences it, and the value stays after the
        run ends), or ``None`` when its own write already stored it.

        A write still in flight is waited for first: on PostgreSQL it could otherwise
        find the lease held, wait for the settle's lock on the progress row, and then
        replace the settle's newer value.
        """
        timer = self._timer
        if timer is not None:
            timer.cancel()
            self._timer = None
        report = self._latest
        if report is None:
            return None
        written = self._written
        if written is not None:
            stored = await asyncio.shield(written)
            if stored and report is self._submitted:
                return None
        return self._write_of(report)

    def _write_latest(self) -> None:
        self._timer = None
        report = self._latest
        assert report is not None  # the timer is set by a report
        self._written_at = self._loop.time()
        self._submitted = report
        self._written = self._writer.submit(self._write_of(report))

    def _write_of(self, report: ProgressReport) -> ProgressWrite:
        run = self._run
        return ProgressWrite(
            run.id,
            run.lease.token,  # type: ignore[union-attr]
            run.attempt,
            report.fraction,
            report.message,
            report.data_json,
        )
