"""``on_lane``: point your app's own runtime at a test lane and clock for one test.

Apps keep one runtime object (``jobs.rl``) that views, endpoints and tasks import.
Rather than building a second runtime that the app's code would never see, a test
swaps that object's lane and clock and puts them back afterwards.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from runlane.core.runtime import Runlane
from runlane.ports.lane import Lane
from runlane.types.clock import Clock
from runlane.types.errors import configuration_error


@contextmanager
def on_lane(rl: Runlane, lane: Lane, *, clock: Clock | None = None) -> Iterator[Runlane]:
    """Run ``rl`` on ``lane`` (and ``clock``) inside the ``with`` block, then restore it.

    The runtime must be closed on entry, and is closed again on exit by whoever opened
    it (the ``runlane_runtime`` fixture does that for you).

    >>> with on_lane(jobs.rl, sqlite_lane(tmp_path / "test.db"), clock=ManualClock()) as rl:
    ...     client.post("/signups", json={"email": "ada@example.com"})
    """
    if not isinstance(lane, Lane):
        raise configuration_error("on_lane needs a lane built by sqlite_lane(...) or similar.")
    if rl.is_open:
        raise configuration_error(
            "on_lane needs a closed runtime: close it (await rl.close()) before the test "
            "swaps its lane, so no connection to the old lane stays in use."
        )
    saved_lane, saved_clock = rl.lane, rl.clock
    # A clock the app chose stays; otherwise the test lane's own (its server's or the host's).
    rl.bind_lane(lane, clock or rl.given_clock)
    try:
        yield rl
    finally:
        rl.bind_lane(saved_lane, saved_clock)
