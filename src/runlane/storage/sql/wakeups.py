"""What both SQL drivers' work listeners share: waiting for an announcement."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


async def wait_for_announcement(
    event: asyncio.Event, deadline: float, generation: Callable[[], int]
) -> bool:
    """True once ``event`` is set (maybe before this call), consuming it; False at the
    loop time ``deadline``, or when ``generation()`` changed meanwhile: the listener
    restarted and announcements may have been missed, so the caller should poll."""
    if event.is_set():
        event.clear()
        return True
    started = generation()
    try:
        # A deadline on the caller's own task: no task wraps the wait (as wait_for's
        # does), so a notification reaches the caller one loop iteration sooner.
        async with asyncio.timeout_at(deadline):
            await event.wait()
    except TimeoutError:
        return False
    if started != generation():
        return False
    event.clear()
    return True
