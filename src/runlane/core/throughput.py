"""Throughput from storage: each runtime counts what its attempts did into the rollup
(:class:`ThroughputRecorder`), and ``rl.throughput_series`` reads it back as chart
points (:class:`ThroughputCharts`).

The recorder counts where settles are already written in batches: each flush of a
settle batcher (:class:`runlane.core.batching.TransitionBatcher`) hands it the
attempts it settled, and it adds their outcomes and start latencies, per queue and
minute, in memory; it writes them to storage in one call every
:data:`THROUGHPUT_FLUSH_INTERVAL` seconds and when the runtime closes. It is not an
observer, so a runtime without observers keeps the attempts' fast path. A chart then
reads a range of the small rollup, never the runs, so it costs the same on a table of
millions of runs. What the rollup counts is what workers settled: an attempt whose
worker died, or that lost its lease before its outcome was written, is counted by
nobody (its lease expiry is in the run's history).

Counts are kept in memory rather than added in the settle's transaction: every
worker's settles would then update the same few rollup rows (a queue's current
minute), and on PostgreSQL wait for each other's row locks.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from runlane.model.queue_defs import QueueDef
from runlane.model.throughput import (
    LATENCY_BOUNDS,
    LATENCY_BOUNDS_MS,
    LATENCY_SERIES,
    OUTCOME_SERIES,
    WINDOWS,
    latency_bucket,
    latency_percentile,
)
from runlane.types.clock import from_micros, to_micros
from runlane.types.errors import RunlaneError, configuration_error
from runlane.types.records import ThroughputRow, Transition
from runlane.types.runs import Run, RunStatus, ThroughputPoint, ThroughputSeries

if TYPE_CHECKING:
    from runlane.core.registry import Registry
    from runlane.core.run_operations import Connect
    from runlane.core.store import StoreScope

logger = logging.getLogger("runlane.throughput")

#: Counts wait in memory at most this long (seconds) before they are written.
THROUGHPUT_FLUSH_INTERVAL = 5.0
#: The rollup keeps minutes this far back: the longest window, and a margin.
THROUGHPUT_RETENTION = timedelta(days=2)

_MINUTE = 60_000_000

#: A (queue, minute)'s counts are one list: the outcome series first, in
#: ``OUTCOME_SERIES`` order, then the latency buckets. Counting an attempt is then two
#: list increments, not two lookups of a (queue, minute, series) key, which cost more
#: than the rest of the count together (callgrind: about 9,000 instructions an
#: attempt with such keys, 3,500 with these lists).
_SERIES = (*OUTCOME_SERIES, *LATENCY_SERIES)
_FIRST_LATENCY = len(OUTCOME_SERIES)

#: The slot a settled attempt's outcome counts in, by the status its settle wrote;
#: outcomes not drawn (a release) count in none.
_OUTCOME_SLOT = {
    RunStatus.SUCCEEDED: OUTCOME_SERIES.index("succeeded"),
    RunStatus.FAILED: OUTCOME_SERIES.index("failed"),
    RunStatus.DEAD_LETTERED: OUTCOME_SERIES.index("failed"),
    RunStatus.RETRYING: OUTCOME_SERIES.index("retried"),
    RunStatus.CANCELLED: OUTCOME_SERIES.index("cancelled"),
}


class ThroughputRecorder:
    """Counts settled attempts per queue and minute, and writes them every few seconds."""

    def __init__(self) -> None:
        """Count now; write once :meth:`bind` gave a store."""
        self._store: StoreScope | None = None
        #: Counts per (queue, minute in microseconds), one slot per series (``_SERIES``).
        self._counts: dict[tuple[str, int], list[int]] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._writing: asyncio.Task[None] | None = None

    def bind(self, store: StoreScope) -> None:
        """Write into ``store`` from now on (a runtime bound to another lane passes its
        new one)."""
        self._store = store

    def count_settled(self, settled: Iterable[tuple[Transition, Run]], at: datetime) -> None:
        """Count the attempts one flush settled at ``at``: each (transition written, run
        as leased) adds to its outcome's series and to the bucket of how long after its
        due time it started."""
        minute = to_micros(at) // _MINUTE * _MINUTE
        counts = self._counts
        slots = _OUTCOME_SLOT
        bounds = LATENCY_BOUNDS
        first_latency = _FIRST_LATENCY
        queue = None
        row: list[int] = []
        for transition, run in settled:
            if run.queue != queue:
                queue = run.queue
                key = (queue, minute)
                row = counts.get(key) or counts.setdefault(key, [0] * len(_SERIES))
            slot = slots.get(transition.changes.status)
            if slot is not None:
                row[slot] += 1
            # A claim stamps the run's updated_at with the time it took the lease;
            # latency_index's rule, inline (this runs for every attempt).
            row[first_latency + bisect_left(bounds, run.updated_at - run.run_at)] += 1
        if self._timer is None and counts:
            loop = asyncio.get_running_loop()
            self._timer = loop.call_later(THROUGHPUT_FLUSH_INTERVAL, self._write_soon)

    async def flush(self) -> None:
        """Write what is counted now (the runtime's ``close`` calls it)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        writing = self._writing
        if writing is not None and not writing.done():
            with contextlib.suppress(Exception):
                await writing
        await self._write()

    def _write_soon(self) -> None:
        self._timer = None
        self._writing = asyncio.ensure_future(self._write())

    async def _write(self) -> None:
        store = self._store
        counts, self._counts = self._counts, {}
        if not counts or store is None:
            return
        rows = [
            ThroughputRow(queue, from_micros(minute), series, count)
            for (queue, minute), row in sorted(counts.items())
            for series, count in zip(_SERIES, row, strict=True)
            if count
        ]
        try:
            older = store.now() - THROUGHPUT_RETENTION
            await store.storage.record_throughput(store.environment, rows, older)
        except RunlaneError as error:
            # Keep them for the next write: storage may be back by then.
            for key, row in counts.items():
                kept = self._counts.get(key)
                if kept is not None:
                    row = [a + b for a, b in zip(kept, row, strict=True)]
                self._counts[key] = row
            logger.warning("throughput counts not written yet: %s", error)


class ThroughputCharts:
    """``rl.throughput_series``: the rollup as chart points."""

    def __init__(self, store: StoreScope, registry: Registry, connect: Connect) -> None:
        """Read the rollup in ``store`` for queues of ``registry``, after ``connect``."""
        self._store = store
        self._registry = registry
        self._connect = connect

    async def series(
        self, queue: QueueDef | str | None = None, window: str = "1h"
    ) -> ThroughputSeries:
        """``Runlane.throughput_series``."""
        if window not in WINDOWS:
            raise configuration_error(
                f"window must be one of {sorted(WINDOWS)}, not {window!r}.", window=window
            )
        name = (
            None
            if queue is None
            else self._registry.resolve_queue(queue, purpose="throughput").name
        )
        span, bucket = WINDOWS[window]
        store = self._store
        # The last bar holds the current minute; the first starts span seconds before.
        current = to_micros(store.now()) // _MINUTE * _MINUTE
        since = from_micros(current + _MINUTE - span * 1_000_000)
        await self._connect()
        rows = await store.storage.read_throughput(store.environment, since, bucket, name)
        return build_series(name, window, since, span, bucket, rows)


def build_series(
    queue: str | None,
    window: str,
    since: datetime,
    span: int,
    bucket: int,
    rows: list[ThroughputRow],
) -> ThroughputSeries:
    """Chart points from rollup rows summed per ``bucket`` seconds from ``since``."""
    size = len(LATENCY_BOUNDS_MS) + 1
    outcomes: defaultdict[datetime, dict[str, int]] = defaultdict(dict)
    latencies: defaultdict[datetime, list[int]] = defaultdict(lambda: [0] * size)
    for row in rows:
        index = latency_bucket(row.series)
        if index is None:
            outcomes[row.period][row.series] = row.count
        else:
            latencies[row.period][index] += row.count
    points = []
    total_outcomes: defaultdict[str, int] = defaultdict(int)
    total_latencies = [0] * size
    for step in range(span // bucket):
        at = since + timedelta(seconds=step * bucket)
        counts = outcomes.get(at, {})
        latency = latencies.get(at, [0] * size)
        for series, count in counts.items():
            total_outcomes[series] += count
        total_latencies = [a + b for a, b in zip(total_latencies, latency, strict=True)]
        points.append(_point(at, counts, latency))
    return ThroughputSeries(
        queue, window, bucket, points, _point(since, total_outcomes, total_latencies)
    )


def _point(at: datetime, counts: dict[str, int], latency: list[int]) -> ThroughputPoint:
    return ThroughputPoint(
        at=at,
        succeeded=counts.get("succeeded", 0),
        failed=counts.get("failed", 0),
        retried=counts.get("retried", 0),
        cancelled=counts.get("cancelled", 0),
        started=sum(latency),
        latency_p50_ms=latency_percentile(latency, 0.5),
        latency_p95_ms=latency_percentile(latency, 0.95),
    )
