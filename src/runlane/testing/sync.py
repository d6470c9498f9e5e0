"""Blocking twins of the test helpers, for sync tests of sync apps (Flask, Django).

They run on the runtime's ``rl.sync`` loop, the same one your app's ``rl.sync.trigger``
calls use, so one runtime object is used one way only.

>>> from runlane.testing.sync import assert_triggered, drain
>>> client.post("/feedback", data={"email": "bo@example.com"})
>>> assert_triggered(rl, thank_customer, payload={"email": "bo@example.com"})
>>> drain(rl, advance="1h")
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from runlane.core.runtime import Runlane
from runlane.model.definitions import TaskDef
from runlane.model.queue_defs import QueueDef
from runlane.testing import assertions, draining
from runlane.testing.assertions import ANY_PAYLOAD
from runlane.types.durations import Duration
from runlane.types.runs import Run


def all_triggered(
    rl: Runlane,
    task: TaskDef[Any] | str | None = None,
    *,
    payload: Any = ANY_PAYLOAD,
    **filters: Any,
) -> list[Run]:
    """Blocking :func:`runlane.testing.all_triggered`."""
    return rl.sync.call(assertions.all_triggered(rl, task, payload=payload, **filters))


def assert_triggered(
    rl: Runlane,
    task: TaskDef[Any] | str,
    *,
    payload: Any = ANY_PAYLOAD,
    count: int | None = None,
    **filters: Any,
) -> list[Run]:
    """Blocking :func:`runlane.testing.assert_triggered`."""
    return rl.sync.call(
        assertions.assert_triggered(rl, task, payload=payload, count=count, **filters)
    )


def drain(
    rl: Runlane,
    *,
    queues: Sequence[QueueDef | str] | None = None,
    advance: Duration | None = None,
    limit: int = draining.DEFAULT_DRAIN_LIMIT,
) -> list[Run]:
    """Blocking :func:`runlane.testing.drain`."""
    return rl.sync.call(draining.drain(rl, queues=queues, advance=advance, limit=limit))


__all__ = ["all_triggered", "assert_triggered", "drain"]
