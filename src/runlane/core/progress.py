"""Storing what tasks report through ``ctx.progress``: coalesced per attempt, written
in groups for the whole runtime.

Each attempt holds an :class:`AttemptProgress`. It keeps only the latest report and
writes at most one value a second (:data:`PROGRESS_INTERVAL`): a task may report in a
tight loop and costs no more than a write a second. The first value waits until the
attempt has run for one interval, so a short attempt writes once, when it ends
(:meth:`AttemptProgress.flush`, before its outcome is settled).

Every attempt's writes go through the runtime's :class:`ProgressWriter`, which writes
whatever is pending in one storage call while the previous call is in flight (as the
settle batcher does): a busy worker whose attempts all end at once flushes their
progress in a handful of writes, not one per run. Storage fences each value with the
attempt's lease token, so a worker that lost its lease overwrites nothing.
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
        #: Resolved when the pending values are written (or their write failed).
        self._next: asyncio.Future[None] | None = None
        self._flushing: asyncio.Task[None] | None = None

    def submit(self, write: ProgressWrite) -> asyncio.Future[None]:
        """Write ``write`` soon (replacing a pending value of the same run); the future
        resolves once it was written, dropped by the fence, or its write failed."""
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
            try:
                for start in range(0, len(batch), MAX_PROGRESS_BATCH):
                    await self._write(batch[start : start + MAX_PROGRESS_BATCH])
            finally:
                if done is not None and not done.done():
                    done.set_result(None)

    async def _write(self, batch: Sequence[ProgressWrite]) -> None:
        store = self._store
        try:
            await store.storage.write_progress(store.environment, batch, store.now())
        except RunlaneError as error:
            # Progress is advice to operators: losing one value never fails an attempt.
            logger.warning("progress of %d runs not stored: %s", len(batch), error)


class AttemptProgress:
    """One attempt's reports: the latest value, written at most once a second."""

    __slots__ = ("_latest", "_loop", "_run", "_timer", "_writer", "_written", "_written_at")

    def __init__(self, writer: ProgressWriter, run: Run) -> None:
        """Report for the attempt ``run`` is leased for, through ``writer``."""
        assert run.lease is not None
        self._writer = writer
        self._run = run
        self._loop = asyncio.get_running_loop()
        #: Loop time of the last write: the attempt's start counts as one, so an attempt
        #: shorter than the interval writes only its final value.
        self._written_at = self._loop.time()
        self._latest: ProgressReport | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._written: asyncio.Future[None] | None = None

    def offer(self, report: ProgressReport) -> None:
        """Keep ``report`` as the latest value; write it within the interval."""
        self._latest = report
        if self._timer is None:
            due = self._written_at + PROGRESS_INTERVAL
            self._timer = self._loop.call_at(due, self._write_latest)

    def offer_threadsafe(self, report: ProgressReport) -> None:
        """:meth:`offer` from a sync task's thread."""
        # A thread that outlived its attempt (past its time limit) may report after the
        # loop closed: nothing is left to store it for.
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self.offer, report)

    async def flush(self) -> None:
        """Write the latest value if it is not written yet, and wait for it: called
        before the attempt's outcome is settled, so the last report is kept."""
        if self._timer is not None:
            self._timer.cancel()
            self._write_latest()
        written = self._written
        if written is not None:
            await asyncio.shield(written)

    def _write_latest(self) -> None:
        self._timer = None
        report, self._latest = self._latest, None
        if report is None:
            return
        self._written_at = self._loop.time()
        run = self._run
        assert run.lease is not None
        self._written = self._writer.submit(
            ProgressWrite(
                run.id,
                run.lease.token,
                run.attempt,
                report.fraction,
                report.message,
                report.data_json,
            )
        )
