"""Delivery requests on bounded queues: which undelivered runs may reserve capacity."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from runlane.model.capacity import Partition, admit_within_capacity, reservation_deadline
from runlane.ports.storage import QueuePolicy
from runlane.storage.sql.rows import Row


def reserve(
    rows: Sequence[Row],
    bounded: Mapping[str, QueuePolicy],
    occupied: Mapping[Partition, int],
    now_us: int,
) -> list[tuple[str, int | None]]:
    """``(run id, reserved until)`` for the ``undelivered_runs`` rows of ``bounded``
    queues that fit their partition's capacity, in the rows' order."""
    queue_of = {row["id"]: row["queue"] for row in rows}
    limits = {name: policy.concurrency_limit or 0 for name, policy in bounded.items()}
    admitted = admit_within_capacity(
        ((row["id"], row["queue"], row["concurrency_key"]) for row in rows), limits, occupied
    )
    return [
        (run_id, reservation_deadline(now_us, bounded[queue_of[run_id]].reservation_window))
        for run_id in admitted
    ]
