"""A lane: one storage plus an optional wakeup transport and an optional topic transport."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from runlane.ports.storage import Storage
from runlane.ports.topic_transport import TopicTransport
from runlane.types.errors import configuration_error


@dataclass(frozen=True)
class Lane:
    """Where a runtime keeps its truth (``storage``), how it wakes workers (``transport``)
    and where its brokered topics go (``topic_transport``, e.g. SNS)."""

    storage: Storage
    transport: Any = None
    name: str = "lane"
    #: Where the truth lives, as operators are shown it (a SQLite file's absolute path).
    location: str = ""
    topic_transport: TopicTransport | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.storage, Storage):
            raise configuration_error(
                f"lane {self.name!r}: storage {type(self.storage).__name__} does not implement "
                "the storage protocol."
            )
        if self.topic_transport is not None and not isinstance(
            self.topic_transport, TopicTransport
        ):
            raise configuration_error(
                f"lane {self.name!r}: topic_transport must be a topic transport such as "
                f"sns_transport(...), got {type(self.topic_transport).__name__}."
            )

    async def open(self) -> None:
        """Open storage, then the transports; if one fails, what was opened is closed."""
        await self.storage.open()
        opened: list[Any] = []
        try:
            for transport in (self.transport, self.topic_transport):
                if transport is not None:
                    await transport.open()
                    opened.append(transport)
        except BaseException:
            for transport in reversed(opened):
                try:
                    await transport.close()
                except Exception:  # the open's failure is the one to report
                    continue
            await self.storage.close()
            raise

    async def close(self) -> None:
        """Close in reverse order: the topic transport, the transport, then storage."""
        try:
            if self.topic_transport is not None:
                await self.topic_transport.close()
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
