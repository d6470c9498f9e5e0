"""A lane: one storage plus an optional wakeup transport."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from runlane.core.errors import configuration_error
from runlane.storage.protocol import Storage


@dataclass(frozen=True)
class Lane:
    """Where a runtime keeps its truth (``storage``) and how it wakes workers (``transport``)."""

    storage: Storage
    transport: Any = None
    name: str = "lane"
    #: Where the truth lives, as operators are shown it (a SQLite file's absolute path).
    location: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.storage, Storage):
            raise configuration_error(
                f"lane {self.name!r}: storage {type(self.storage).__name__} does not implement "
                "the storage protocol."
            )

    async def open(self) -> None:
        """Open storage, then the transport; if the transport fails, storage is closed."""
        await self.storage.open()
        if self.transport is not None:
            try:
                await self.transport.open()
            except BaseException:
                await self.storage.close()
                raise

    async def close(self) -> None:
        """Close in reverse order: transport, then storage."""
        try:
            if self.transport is not None:
                await self.transport.close()
        finally:
            await self.storage.close()


class LaneConnection:
    """Whether a runtime's lane is open: opened once however many callers ask at the
    same time, closed on request. ``lane`` may be swapped while closed."""

    def __init__(self, lane: Lane) -> None:
        self.lane = lane
        self.is_open = False
        self._lock: asyncio.Lock | None = None

    async def open(self) -> None:
        """Open the lane unless it is open. Safe to call more than once."""
        if self.is_open:
            return
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if not self.is_open:
                await self.lane.open()
                self.is_open = True

    async def close(self) -> None:
        """Close the lane (also when only a migration connected it)."""
        self.is_open = False
        await self.lane.close()
