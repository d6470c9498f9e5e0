"""What claiming means on every dialect, apart from how the statements lock.

Delivery runs of EXCLUSIVE and ORDERED subscriptions carry a partition key
(contract 5.7); task runs and NONE deliveries store none, so every key rule in
the claim statements is guarded by ``partition_key IS NOT NULL`` and costs a
task run nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from runlane.model.queue_defs import UNKEYED
from runlane.types.records import QueuePolicy
from runlane.types.runs import Run


def split_by_capacity(queues: Sequence[QueuePolicy]) -> tuple[dict[str, int], list[str]]:
    """The bounded queues' limits by name, and the unbounded queues' names, each once
    and in the order given: bounded queues are claimed within capacity, the rest freely."""
    bounded = {q.name: q.concurrency_limit for q in queues if q.concurrency_limit is not None}
    unbounded = list(dict.fromkeys(q.name for q in queues if q.concurrency_limit is None))
    return bounded, unbounded


def split_rate_limited(
    queues: Sequence[QueuePolicy],
) -> tuple[Sequence[QueuePolicy], Sequence[QueuePolicy]]:
    """The rate-limited queues (each once, in the order given) and the others: a
    rate-limited queue's claim takes its tokens in the claim's transaction, so it is
    claimed apart, and the others' claims stay as they were."""
    for policy in queues:
        if policy.rate_limit is not None:
            break
    else:
        # The common case, on every claim: no copy, nothing built.
        return _NONE_LIMITED, queues
    limited = list({q.name: q for q in queues if q.rate_limit is not None}.values())
    return limited, [q for q in queues if q.rate_limit is None]


_NONE_LIMITED: list[QueuePolicy] = []


#: The partition of a queue limited as a whole: the one runs without a rate key share.
WHOLE_QUEUE = UNKEYED


def widest_priority_window(queues: Sequence[QueuePolicy]) -> float:
    """The widest priority window (seconds) of ``queues``: a claim of them reads each
    queue's claim order up to now plus it (no due run's claim time is later)."""
    widest = 0.0
    for policy in queues:
        if policy.priority_window > widest:
            widest = policy.priority_window
    return widest


def claim_order(run: Run) -> tuple[datetime, str]:
    """Claimed runs come back oldest ``run_at`` first, ties broken by id. (Which runs
    a claim takes follows their priorities; the runs of one claim start together.)"""
    return run.run_at, run.id


# -- key locks (PostgreSQL, contract 5.7.4 and 5.14) ------------------------------------
#
# One transaction-scoped advisory lock per (subscription, key) serialises everything
# that decides on a key: publishes (which draw the message sequence under it) and
# claims (which then read the key's deliveries with a fresh snapshot). The lock is
# ``hashtextextended(name, 0)`` of the name below; the claim statements build the
# same name in SQL: ``prefix || length(task_id) || ':' || task_id || ':' ||
# partition_key``. The subscription's length makes the name unambiguous whatever
# the key holds.


def key_lock_prefix(schema: str, environment: str) -> str:
    """The start of every key lock name of one environment in one schema."""
    return f"runlane.key:{schema}:{environment}:"


def key_lock_name(schema: str, environment: str, subscription: str, key: str) -> str:
    """The advisory lock name of one (subscription, key)."""
    return f"{key_lock_prefix(schema, environment)}{len(subscription)}:{subscription}:{key}"
