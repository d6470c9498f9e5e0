"""Token arithmetic of rate limits, written once for every driver: GCRA.

One stored value per partition, its *theoretical arrival time* ``tat`` (microseconds):
the moment the partition's bucket is full again. With ``T`` the interval between
tokens and a tolerance of ``(burst - 1) * T``, a start at ``now`` is allowed while
``tat - tolerance <= now``, and each start moves ``tat`` to ``max(tat, now) + T``. An
idle partition (``tat`` in the past, or none stored) so starts ``burst`` at once and
then one per ``T``; in any window of length ``per`` at most ``count + burst - 1``
start. Tokens are never given back: ``tat`` only moves forward.
"""

from __future__ import annotations

from runlane.types.rate_limits import RateLimit


def tokens_available(limit: RateLimit, tat: int | None, now: int) -> int:
    """How many starts the partition may make at ``now`` (0 to ``burst``)."""
    interval = limit.interval_micros
    start = now if tat is None or tat < now else tat
    # Start k (0-based) needs start + k*T - (burst - 1)*T <= now.
    room = now - start + (limit.burst - 1) * interval
    if room < 0:
        return 0
    return min(limit.burst, room // interval + 1)


def tat_after(limit: RateLimit, tat: int | None, now: int, taken: int) -> int:
    """The partition's stored value after ``taken`` starts at ``now``."""
    start = now if tat is None or tat < now else tat
    return start + taken * limit.interval_micros


def tolerance(limit: RateLimit) -> int:
    """How far ahead of now a partition's ``tat`` may be while it still has a token."""
    return (limit.burst - 1) * limit.interval_micros


def token_time(limit: RateLimit, tat: int | None) -> int:
    """When a partition whose stored value is ``tat`` has its next token (in the past
    for an idle partition): what a partition's ``token_at`` holds."""
    if tat is None:
        return 0
    return tat - tolerance(limit)


def partition_scan(limit: int) -> int:
    """How many ready partitions of a queue limited per key one claim of up to
    ``limit`` runs reads: a few more than it needs, for partitions that turn out to
    have nothing to start (no slot, or a token state a new limit reads otherwise)."""
    return 2 * limit + 8


def next_token_at(limit: RateLimit, tat: int | None, now: int) -> int:
    """When the partition may start again (``now`` if it may already)."""
    if tat is None:
        return now
    return max(now, tat - (limit.burst - 1) * limit.interval_micros)


def rate_limited_counts(due: list[int], tokens: int) -> list[int]:
    """Of the due runs of one partition's entries (``due``, in order), how many in each
    wait for tokens: the ``tokens`` available now go to the entries first to last."""
    waiting = []
    for count in due:
        served = min(count, tokens)
        tokens -= served
        waiting.append(count - served)
    return waiting
