"""Capacity and ownership rules, as plain functions over plain data.

Storage drivers count what a bounded queue's partitions hold and read who owns an
idempotency key; what those facts allow is decided here, once, so every driver
decides it the same way. Nothing here does I/O: the driver reads the facts under
its own lock and acts on the answer in the same transaction.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from runlane.types.runs import RunStatus

#: Seconds a dispatch reservation lasts when a queue policy names no window.
DEFAULT_RESERVATION_WINDOW = 30.0

#: A bounded queue's unit of capacity: the queue and a concurrency key ("" for none).
Partition = tuple[str, str]


def partition_of(queue: str, concurrency_key: str | None) -> Partition:
    """The partition a run of ``queue`` with ``concurrency_key`` occupies."""
    return (queue, concurrency_key or "")


def has_capacity(occupied: int, limit: int) -> bool:
    """Whether a partition holding ``occupied`` runs may take one more under ``limit``."""
    return occupied < limit


def admit_within_capacity(
    candidates: Iterable[tuple[str, str, str | None]],
    limits: Mapping[str, int],
    occupied: Mapping[Partition, int],
) -> list[str]:
    """The ids of ``candidates`` (``(run id, queue, concurrency key)``, in priority order)
    that fit: each admitted run takes a slot of its partition, so later candidates of a
    full partition are left out. ``occupied`` counts what each partition already holds
    (absent: nothing) and is not changed."""
    held = dict(occupied)
    admitted: list[str] = []
    for run_id, queue, key in candidates:
        part = partition_of(queue, key)
        count = held.get(part, 0)
        if has_capacity(count, limits[queue]):
            held[part] = count + 1
            admitted.append(run_id)
    return admitted


def reservation_deadline(now_us: int, window: float | None) -> int:
    """When a dispatch reservation made at ``now_us`` ends, in microseconds; a queue with
    no window of its own reserves for :data:`DEFAULT_RESERVATION_WINDOW` seconds."""
    return now_us + int((window or DEFAULT_RESERVATION_WINDOW) * 1_000_000)


def owner_holds(status: str, key_expires_at: int | None, now_us: int) -> bool:
    """Whether an idempotency key's owner run, in ``status``, still holds the key at
    ``now_us`` (microseconds).

    Active owners always hold it; failed owners never do; finished owners hold it
    until the key's retention ends (``None``: only while active).
    """
    owner_status = RunStatus(status)
    if owner_status.is_active:
        return True
    if owner_status is RunStatus.FAILED or key_expires_at is None:
        return False
    return key_expires_at > now_us
