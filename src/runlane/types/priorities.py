"""Priorities (SPEC-flow 7.2): which due run of a queue starts first, with starvation
bounded by the queue's priority window.

A run is ordered by its *claim time*, ``run_at - priority * window / 10``: a
priority-10 run goes before a priority-0 run that has been due for less than one
window, and no due run waits behind runs that became due more than two windows
after it. The offset is fixed when the run is created (with the queue's window
then) and stored beside ``run_at``, so retries, releases and expired leases, which
move ``run_at``, keep the run's priority; the claim reads an index on the claim
time in order, however many priorities a queue mixes.
"""

from __future__ import annotations

from runlane.types.durations import Duration, parse_duration
from runlane.types.errors import configuration_error

#: The lowest and highest priority; runs are created at the default.
MIN_PRIORITY = -10
MAX_PRIORITY = 10
DEFAULT_PRIORITY = 0
#: A queue's priority window when its definition names none (seconds): five minutes.
DEFAULT_PRIORITY_WINDOW = 300.0
#: The shortest and longest priority window (seconds).
MIN_PRIORITY_WINDOW = 1.0
MAX_PRIORITY_WINDOW = 86_400.0


def validate_priority(value: object, *, name: str = "priority") -> int:
    """``value`` if it is a whole number from -10 to 10, else ``CONFIGURATION_INVALID``
    (a bool is not a priority, nor is ``1.0``)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise configuration_error(
            f"{name} must be a whole number from {MIN_PRIORITY} to {MAX_PRIORITY}, "
            f"got {type(value).__name__}.",
        )
    if not MIN_PRIORITY <= value <= MAX_PRIORITY:
        raise configuration_error(
            f"{name} must be from {MIN_PRIORITY} to {MAX_PRIORITY}, got {value}.",
            priority=value,
        )
    return value


def parse_priority_window(value: Duration | None, *, queue: str) -> float:
    """A queue's priority window in seconds (``None``: the default, five minutes); a
    duration from 1 s to 1 day, else ``CONFIGURATION_INVALID``."""
    if value is None:
        return DEFAULT_PRIORITY_WINDOW
    seconds = parse_duration(value, name=f"queue {queue!r}: priority_window", allow_zero=False)
    if not MIN_PRIORITY_WINDOW <= seconds <= MAX_PRIORITY_WINDOW:
        raise configuration_error(
            f"queue {queue!r}: priority_window must be between 1 s and 1 day, got {value!r}."
        )
    return seconds


def priority_offset(priority: int, window: float) -> int:
    """Microseconds a run of ``priority`` is moved ahead (negative: behind) of its due
    time in its queue's order, under a priority window of ``window`` seconds."""
    if not priority:
        return 0  # most runs: no float arithmetic on the trigger path
    return round(priority * window * 1_000_000 / 10)


def claim_horizon(now_us: int, window: float) -> int:
    """The latest claim time a due run of a queue with ``window`` can have (a run of
    the lowest priority due now): the claim's index range ends here."""
    return now_us + round(window * 1_000_000)
