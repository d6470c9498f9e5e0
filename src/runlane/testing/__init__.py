"""Helpers for users' own tests, and the conformance suites every driver must pass.

Installing runlane registers a pytest plugin (:mod:`runlane.testing.plugin`) whose
``runlane_runtime`` fixture puts your app's runtime on a throwaway SQLite file and a
:class:`ManualClock` for one test. The helpers here work on any runtime:

>>> await rl.trigger(send_welcome, {"to": "ada@example.com"})
>>> await assert_triggered(rl, send_welcome, payload={"to": "ada@example.com"})
>>> runs = await drain(rl, advance="1h")   # execute due work, moving the clock if needed

Sync tests use the blocking twins in :mod:`runlane.testing.sync`.
"""

from __future__ import annotations

import asyncio
from typing import Any

from runlane.core.runtime import Runlane
from runlane.testing.assertions import ANY_PAYLOAD, all_triggered, assert_triggered
from runlane.testing.draining import DEFAULT_DRAIN_LIMIT, drain
from runlane.testing.limits import MAX_TRACEBACK_CHARS, TRIGGER_BATCH_SIZE
from runlane.testing.rebinding import on_lane
from runlane.types.clock import ManualClock
from runlane.types.runs import Run


async def wait_for_status(rl: Runlane, run_id: str, *statuses: Any, within: float = 10.0) -> Run:
    """Poll until the run reaches one of ``statuses`` (real time), or raise TimeoutError."""
    deadline = asyncio.get_running_loop().time() + within
    while True:
        run = await rl.runs.get(run_id)
        if run.status in statuses:
            return run
        if asyncio.get_running_loop().time() > deadline:
            raise TimeoutError(f"run {run_id} is {run.status.value}, wanted {statuses}")
        await asyncio.sleep(0.02)


__all__ = [
    "ANY_PAYLOAD",
    "DEFAULT_DRAIN_LIMIT",
    "MAX_TRACEBACK_CHARS",
    "TRIGGER_BATCH_SIZE",
    "ManualClock",
    "all_triggered",
    "assert_triggered",
    "drain",
    "on_lane",
    "wait_for_status",
]
