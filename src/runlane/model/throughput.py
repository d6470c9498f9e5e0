"""Throughput in numbers: which series the rollup counts, the start-latency buckets,
and percentiles from them. Pure functions over plain data, decided once for every
driver and surface.

Each attempt a runtime settles adds one to its outcome's series for the minute it
settled in (``succeeded``, ``failed``, ``retried``, ``cancelled``) and one to the
latency bucket of its start: how long after it was due (``run_at``) its lease was
taken. Percentiles read from buckets are the bucket's upper bound, so a p95 of
"200 ms" means "95 % of starts came within 200 ms" (the bounds grow by about 2.5x).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Mapping, Sequence
from datetime import timedelta

#: The outcomes the rollup counts, in chart order.
OUTCOME_SERIES = ("succeeded", "failed", "retried", "cancelled")

#: Upper bounds (milliseconds) of the start-latency buckets; one more bucket holds
#: everything slower than the last bound.
LATENCY_BOUNDS_MS: tuple[int, ...] = (
    5, 10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 30_000, 60_000, 300_000,
    900_000, 3_600_000,
)  # fmt: skip

#: The windows the dashboard draws, with the width of one bar: minutes over the last
#: hour, quarter hours over the last day.
WINDOWS: Mapping[str, tuple[int, int]] = {"1h": (3_600, 60), "1d": (86_400, 900)}


#: The same bounds as durations: a start's wait is bisected among them as it is.
LATENCY_BOUNDS: tuple[timedelta, ...] = tuple(
    timedelta(milliseconds=ms) for ms in LATENCY_BOUNDS_MS
)

#: The series names of the latency buckets, by bucket index.
LATENCY_SERIES: tuple[str, ...] = tuple(
    f"latency_{index:02d}" for index in range(len(LATENCY_BOUNDS_MS) + 1)
)


def latency_index(waited: timedelta) -> int:
    """The index of the latency bucket of a start that came ``waited`` after its run
    was due: the first whose bound it does not pass (a negative wait counts as none)."""
    return bisect_left(LATENCY_BOUNDS, waited)


def latency_bucket(series: str) -> int | None:
    """The bucket index of a latency series name, or ``None`` for another series."""
    if not series.startswith("latency_"):
        return None
    index = int(series.removeprefix("latency_"))
    return index if 0 <= index <= len(LATENCY_BOUNDS_MS) else None


def latency_percentile(counts: Sequence[int], fraction: float) -> float | None:
    """The latency (ms) below which ``fraction`` of the starts in ``counts`` (one count
    per bucket) fell: the upper bound of the bucket where that share is reached;
    ``None`` with no starts. Past the last bound it is the last bound (a lower bound).

    >>> latency_percentile([0, 3, 1] + [0] * 14, 0.5)
    10
    """
    total = sum(counts)
    if total == 0:
        return None
    needed = fraction * total
    seen = 0
    for index, count in enumerate(counts):
        seen += count
        if seen >= needed and count:
            return LATENCY_BOUNDS_MS[min(index, len(LATENCY_BOUNDS_MS) - 1)]
    return LATENCY_BOUNDS_MS[-1]
