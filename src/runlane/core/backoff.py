"""How a long-running process started while its storage is down waits for it, and the
back-off it waits with (kept in :mod:`runlane.types.backoff`, so transports share it)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from runlane.types.backoff import ERROR_BACKOFF_INITIAL, ERROR_BACKOFF_MAX, ErrorBackoff
from runlane.types.errors import ErrorCode, RunlaneError

__all__ = [
    "ERROR_BACKOFF_INITIAL",
    "ERROR_BACKOFF_MAX",
    "ErrorBackoff",
    "StopFlag",
    "connect_when_reachable",
]


class StopFlag(Protocol):
    """What ends the wait: an :class:`asyncio.Event` or a runlane ``Signal``."""

    def is_set(self) -> bool:
        """Whether the process was asked to stop."""

    async def wait(self) -> Any:
        """Until it is asked to stop."""


async def connect_when_reachable(
    connect: Callable[[], Awaitable[None]], stop: StopFlag, who: str, log: logging.Logger
) -> bool:
    """Run ``connect`` until it succeeds, waiting with :class:`ErrorBackoff` while storage
    is unavailable: a long-running process (a polling worker, ``runlane tick --every``)
    started during a database restart or outage waits for the server instead of exiting.
    False if ``stop`` is set first. Any other error (bad settings, an old schema) raises
    at once, since waiting would not cure it."""
    backoff = ErrorBackoff()
    while True:
        try:
            await connect()
            return True
        except RunlaneError as error:
            if error.code is not ErrorCode.STORAGE_UNAVAILABLE:
                raise
            delay = backoff.next_delay()
            log.warning(
                "%s: storage unavailable at start (%s); trying again in %.1fs", who, error, delay
            )
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), delay)
        if stop.is_set():
            return False
