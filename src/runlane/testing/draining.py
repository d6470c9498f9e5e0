"""``drain``: execute due work in this process until none is left, like Dramatiq's ``join``."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from runlane.core.run_operations import MAX_PAGE_SIZE
from runlane.core.runtime import Runlane
from runlane.model.queue_defs import QueueDef
from runlane.types.clock import ManualClock
from runlane.types.durations import Duration, parse_optional_duration
from runlane.types.errors import configuration_error
from runlane.types.runs import CLAIMABLE_STATUSES, Run

#: ``drain`` stops after this many attempts unless told otherwise (guards endless releases).
DEFAULT_DRAIN_LIMIT = 10_000


async def drain(
    rl: Runlane,
    *,
    queues: Sequence[QueueDef | str] | None = None,
    advance: Duration | None = None,
    limit: int = DEFAULT_DRAIN_LIMIT,
) -> list[Run]:
    """Execute due runs one attempt at a time in this process until none is due.

    Returns each attempt's run as it settled, in order (a run retried twice appears
    three times). With ``advance`` the runtime's :class:`~runlane.ManualClock` jumps
    ahead to each waiting run (a delay, a retry's backoff, a release) as long as the
    total jump stays within ``advance``; the clock stays where the last jump left it.
    Schedules are not materialised here: call ``await rl.tick()`` for that.

    >>> await rl.trigger(send_welcome, {"to": "ada@example.com"}, delay="10m")
    >>> (done,) = await drain(rl, advance="1h")
    >>> done.status is RunStatus.SUCCEEDED
    True
    """
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise configuration_error("drain's limit must be a whole number of at least 1.")
    horizon = _horizon(rl, advance)
    executed: list[Run] = []
    while len(executed) < limit:
        run = await rl.execute_next(queues=queues)
        if run is not None:
            executed.append(run)
            continue
        if horizon is None:
            break
        waiting = await _next_run_at(rl, queues)
        # A run due now that could not be claimed waits for capacity, not for time.
        if waiting is None or waiting <= rl.clock.now() or waiting > horizon:
            break
        assert isinstance(rl.clock, ManualClock)  # checked by _horizon
        rl.clock.set(waiting)
    return executed


def _horizon(rl: Runlane, advance: Duration | None) -> datetime | None:
    seconds = parse_optional_duration(advance, name="advance")
    if seconds is None:
        return None
    if not isinstance(rl.clock, ManualClock):
        raise configuration_error(
            "drain(advance=...) moves the runtime's clock, so the runtime needs "
            "clock=ManualClock() (the runlane_runtime fixture has one).",
        )
    return rl.clock.now() + timedelta(seconds=seconds)


async def _next_run_at(rl: Runlane, queues: Sequence[QueueDef | str] | None) -> datetime | None:
    """The earliest ``run_at`` among runs waiting to start, if any."""
    earliest: datetime | None = None
    cursor: str | None = None
    while True:
        page = await rl.runs.list(
            statuses=list(CLAIMABLE_STATUSES), queues=queues, limit=MAX_PAGE_SIZE, cursor=cursor
        )
        for run in page.data:
            if earliest is None or run.run_at < earliest:
                earliest = run.run_at
        cursor = page.next_cursor
        if cursor is None:
            return earliest
