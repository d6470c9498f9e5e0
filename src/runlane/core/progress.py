"""Storing what tasks report through ``ctx.progress``: coalesced per attempt, written
in groups for the whole runtime, the last value with the attempt's settle.

Each attempt holds an :class:`AttemptProgress`. It keeps only the latest report and
writes at most one value a second (:data:`PROGRESS_INTERVAL`): a task may report in a
tight loop and costs no more than a write a second. The first value waits one interval
(and up to a quarter more) after the first report, so an attempt that reports for
less than that writes nothing of its own: its last value rides on the transition that settles it
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
import types
from collections.abc import Awaitable, Generator, Sequence

from runlane.core.store import StoreScope
from runlane.types.errors import RunlaneError
from runlane.types.records import ProgressWrite
from runlane.types.runs import Run

logger = logging.getLogger("runlane.worker")
_new_tuple = tuple.__new__

#: At most one stored value per run this often (seconds).
PROGRESS_INTERVAL = 1.0
#: How often per interval the writer looks for values due: a value is written between
#: one interval and a quarter more after its attempt's previous write or first report.
SWEEPS_PER_INTERVAL = 4
#: Most values written in one storage call.
MAX_PROGRESS_BATCH = 500


@types.coroutine
def _stored() -> Generator[None, None, None]:
    return
    yield  # a generator, closed below before it ever runs


#: What every ``ctx.progress`` call returns. Storing a report is only keeping it, so
#: nothing waits: a generator-based coroutine that is already finished, which any
#: number of awaits in any event loop finish at once with ``None``. Awaiting it costs
#: less than awaiting a done future (which makes an iterator per await), and far less
#: than a coroutine per call.
STORED: Awaitable[None] = _stored()
STORED.close()  # type: ignore[attr-defined]


class ProgressWriter:
    """Writes attempts' latest progress, grouping what arrives while a write is in flight.

    One timer serves every attempt of the runtime: it sweeps the attempts whose value
    waits :data:`SWEEPS_PER_INTERVAL` times an interval while any waits, so an attempt
    costs no timer of its own (most attempts end before their first value is due).
    """

    def __init__(self, store: StoreScope) -> None:
        """Write into ``store``."""
        self._store = store
        self._pending: dict[str, ProgressWrite] = {}
        #: Resolved when the pending values are written (True) or their write failed.
        self._next: asyncio.Future[bool] | None = None
        self._flushing: asyncio.Task[None] | None = None
        #: Attempts whose latest value waits, each with the sweep it began waiting after.
        self._waiting: dict[AttemptProgress, int] = {}
        self._sweeps = 0
        self._sweeper: asyncio.TimerHandle | None = None

    def wait(self, attempt: AttemptProgress) -> Awaitable[None]:
        """Have ``attempt``'s latest value written once a whole interval has passed;
        :data:`STORED`, for ``ctx.progress`` to return."""
        self._waiting[attempt] = self._sweeps
        if self._sweeper is None:
            loop = asyncio.get_running_loop()
            self._sweeper = loop.call_later(PROGRESS_INTERVAL / SWEEPS_PER_INTERVAL, self._sweep)
        return STORED

    def forget(self, attempt: AttemptProgress) -> None:
        """Stop waiting to write ``attempt``'s value (it ended)."""
        self._waiting.pop(attempt, None)

    def _sweep(self) -> None:
        self._sweeps = sweeps = self._sweeps + 1
        waiting = self._waiting
        due = [
            attempt for attempt, since in waiting.items() if sweeps - since > SWEEPS_PER_INTERVAL
        ]
        for attempt in due:
            del waiting[attempt]
            attempt.write_latest()
        self._sweeper = None
        if waiting:
            loop = asyncio.get_running_loop()
            self._sweeper = loop.call_later(PROGRESS_INTERVAL / SWEEPS_PER_INTERVAL, self._sweep)

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
    the attempt runs, and the last one handed to the attempt's settle.

    It is the attempt's :class:`~runlane.model.context.ProgressSink`: ``ctx.progress``
    sets :attr:`latest` itself and calls :meth:`queue` only when :attr:`queued` is
    ``None`` (a method call per report cost a third of the report).
    """

    __slots__ = ("_loop", "_run", "_submitted", "_writer", "handed", "latest", "queued")

    #: The latest report's fields (a tuple made per report: ``end`` tells by identity
    #: whether the one its writer stored is still the latest).
    latest: tuple[float, str | None, str | None] | None
    _submitted: tuple[float, str | None, str | None] | None

    def __init__(self, writer: ProgressWriter, run: Run) -> None:
        """Report for the attempt ``run`` is leased for, through ``writer``."""
        assert run.lease is not None
        # Built for every attempt, reporting or not: no clock, no timer.
        self._writer = writer
        self._run = run
        self._loop = asyncio.get_running_loop()
        self.latest = None
        #: While the writer holds this attempt for a write when its interval is up:
        #: :data:`STORED`, which ``ctx.progress`` returns (``None`` otherwise).
        self.queued: Awaitable[None] | None = None
        #: The report last handed to the writer, and its write (:attr:`handed`).
        self._submitted = None
        #: The write of the report last handed to the writer (the attempt outlived an
        #: interval), or ``None`` while none was: :meth:`end` then waits for it, and
        #: :meth:`last` may not stand in for :meth:`end`.
        self.handed: asyncio.Future[bool] | None = None

    def queue(self) -> Awaitable[None]:
        """Have :attr:`latest` written within the interval; what ``ctx.progress`` returns."""
        self.queued = queued = self._writer.wait(self)
        return queued

    def offer(self, fraction: float, message: str | None, data_json: str | None) -> Awaitable[None]:
        """Keep a checked report as the latest value; write it within the interval.
        :data:`STORED` is what ``ctx.progress`` returns."""
        self.latest = (fraction, message, data_json)
        return self.queued or self.queue()

    def offer_threadsafe(self, fraction: float, message: str | None, data_json: str | None) -> None:
        """:meth:`offer` from a sync task's thread."""
        # A thread that outlived its attempt (past its time limit) may report after the
        # loop closed: nothing is left to store it for.
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self.offer, fraction, message, data_json)

    def write_latest(self) -> None:
        """Hand the latest value to the writer (its interval is up)."""
        self.queued = None
        report = self.latest
        assert report is not None  # the writer holds an attempt only after a report
        self._submitted = report
        self.handed = self._writer.submit(self._write_of(report))

    def last(self) -> ProgressWrite | None:
        """Stop writing, once the handler is done, in an attempt that handed nothing to
        the writer (:attr:`handed` is ``None``, as in most attempts, which end within an
        interval): the last report for the attempt's settle to store, or ``None``
        without one. Nothing to wait for, so no coroutine (nor any other call: this is
        every reporting attempt's path)."""
        if self.queued is not None:
            self.queued = None
            self._writer._waiting.pop(self, None)  # forget(self), inlined
        report = self.latest
        if report is None:
            return None
        run = self._run  # _write_of(report), inlined
        fields = (run.id, run.lease.token, run.attempt) + report  # type: ignore[union-attr]  # noqa: RUF005
        return _new_tuple(ProgressWrite, fields)

    async def end(self) -> ProgressWrite | None:
        """Stop writing, once the handler is done: the last report, for the attempt's
        settle to store (its compare-and-set fences it, and the value stays after the
        run ends), or ``None`` when its own write already stored it.

        A write still in flight is waited for first: whether it stored the last report
        decides whether the settle carries it.
        """
        written = self.handed
        if written is None:
            return self.last()
        if self.queued is not None:
            self.queued = None
            self._writer.forget(self)
        report = self.latest
        assert report is not None  # one was handed to the writer
        stored = await asyncio.shield(written)
        if stored and report is self._submitted:
            return None
        return self._write_of(report)

    def _write_of(self, report: tuple[float, str | None, str | None]) -> ProgressWrite:
        run = self._run
        # The named tuple built from a plain one, skipping its Python-level __new__ (and
        # concatenated: unpacking ``*report`` builds a list on the way).
        fields = (run.id, run.lease.token, run.attempt) + report  # type: ignore[union-attr]  # noqa: RUF005
        return _new_tuple(ProgressWrite, fields)
