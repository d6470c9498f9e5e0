"""Queue statistics: ``queue_stats`` and ``count_finished_runs`` rows folded per queue."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from runlane.ports.storage import QueuePolicy
from runlane.storage.sql.rows import Row
from runlane.types.clock import from_micros
from runlane.types.runs import QueueStats, RunStatus

#: One ``queue_stats`` row: queue, concurrency key, status, count, occupying, due,
#: and the earliest due ``run_at`` in microseconds (``None`` when nothing is due).
QueueStatsRow = tuple[str, str | None, str, int, int, int, int | None]


def queue_stats_rows(rows: Iterable[Row]) -> Iterable[QueueStatsRow]:
    """The ``queue_stats`` statement's rows in :data:`QueueStatsRow` order."""
    return (
        (
            r["queue"],
            r["concurrency_key"],
            r["status"],
            r["count"],
            r["occupying"],
            r["due"],
            r["oldest_due"],
        )
        for r in rows
    )


def build_queue_stats(
    queues: Sequence[QueuePolicy], rows: Iterable[QueueStatsRow]
) -> list[QueueStats]:
    """Fold :data:`QueueStatsRow` rows into per-queue stats.

    Unbounded queues fold all keys into one row; bounded queues keep a row per key.
    ``occupying`` counts the runs holding capacity (unexpired lease or reservation);
    ``due`` the claimable runs whose ``run_at`` has passed.
    """
    limits = {q.name: q.concurrency_limit for q in queues}
    counts: dict[tuple[str, str | None], dict[RunStatus, int]] = {
        (q.name, None): {} for q in queues
    }
    occupied: dict[tuple[str, str | None], int] = {}
    due: dict[tuple[str, str | None], int] = {}
    oldest_due: dict[tuple[str, str | None], int] = {}
    for queue_name, key, status, count, occupying, due_count, oldest in rows:
        bucket_key = (queue_name, key if limits.get(queue_name) is not None else None)
        bucket = counts.setdefault(bucket_key, {})
        status_value = RunStatus(status)
        bucket[status_value] = bucket.get(status_value, 0) + int(count)
        occupied[bucket_key] = occupied.get(bucket_key, 0) + int(occupying or 0)
        due[bucket_key] = due.get(bucket_key, 0) + int(due_count or 0)
        if oldest is not None:
            oldest_due[bucket_key] = min(oldest_due.get(bucket_key, int(oldest)), int(oldest))
    stats = []
    for bucket_key, by_status in sorted(
        counts.items(), key=lambda item: (item[0][0], item[0][1] or "")
    ):
        oldest = oldest_due.get(bucket_key)
        stats.append(
            QueueStats(
                bucket_key[0],
                bucket_key[1],
                limits.get(bucket_key[0]),
                by_status,
                occupied.get(bucket_key, 0),
                due=due.get(bucket_key, 0),
                oldest_due_at=from_micros(oldest) if oldest is not None else None,
            )
        )
    return stats


def finished_counts(rows: Iterable[Row]) -> dict[str, dict[RunStatus, int]]:
    """``count_finished_runs`` rows (queue, status, n) folded per queue and status."""
    counts: dict[str, dict[RunStatus, int]] = {}
    for row in rows:
        counts.setdefault(row["queue"], {})[RunStatus(row["status"])] = int(row["n"])
    return counts
