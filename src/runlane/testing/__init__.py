"""Helpers for users' own tests, and the conformance suites every driver must pass.

>>> from runlane.testing import drain
>>> runs = await drain(rl)          # execute every due run inline, like a worker would
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from runlane.core.clock import ManualClock
from runlane.core.definitions import QueueDef
from runlane.core.models import Run
from runlane.core.runtime import Runlane

#: ``drain`` stops after this many attempts unless told otherwise (guards endless releases).
DEFAULT_DRAIN_LIMIT = 10_000


async def drain(
    rl: Runlane,
    *,
    queues: Sequence[QueueDef | str] | None = None,
    limit: int = DEFAULT_DRAIN_LIMIT,
) -> list[Run]:
    """Execute due runs one by one in this process until none is due; return them as settled."""
    executed: list[Run] = []
    while len(executed) < limit:
        run = await rl.execute_next(queues=queues)
        if run is None:
            break
        executed.append(run)
    return executed


async def wait_for_status(rl: Runlane, run_id: str, *statuses: Any, within: float = 10.0) -> Run:
    """Poll until the run reaches one of ``statuses`` (real time), or raise TimeoutError."""
    import asyncio

    deadline = asyncio.get_running_loop().time() + within
    while True:
        run = await rl.runs.get(run_id)
        if run.status in statuses:
            return run
        if asyncio.get_running_loop().time() > deadline:
            raise TimeoutError(f"run {run_id} is {run.status.value}, wanted {statuses}")
        await asyncio.sleep(0.02)


__all__ = ["ManualClock", "drain", "wait_for_status"]
