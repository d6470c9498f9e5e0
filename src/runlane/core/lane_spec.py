"""A lane: one storage plus an optional wakeup transport."""

from __future__ import annotations

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
