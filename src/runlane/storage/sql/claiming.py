"""What claiming means on every dialect, apart from how the statements lock."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from runlane.types.records import QueuePolicy
from runlane.types.runs import Run


def split_by_capacity(queues: Sequence[QueuePolicy]) -> tuple[dict[str, int], list[str]]:
    """The bounded queues' limits by name, and the unbounded queues' names, each once
    and in the order given: bounded queues are claimed within capacity, the rest freely."""
    bounded = {q.name: q.concurrency_limit for q in queues if q.concurrency_limit is not None}
    unbounded = list(dict.fromkeys(q.name for q in queues if q.concurrency_limit is None))
    return bounded, unbounded


def claim_order(run: Run) -> tuple[datetime, str]:
    """Claimed runs come back oldest ``run_at`` first, ties broken by id."""
    return run.run_at, run.id
