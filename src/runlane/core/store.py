"""The store scope: one storage bound to one environment and one clock.

Most core pieces need exactly these three to talk to storage; they receive a
scope instead of the whole runtime, so their signature says what they touch.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import cast

from runlane.ports.storage import Storage, StoresMessages
from runlane.types.clock import Clock
from runlane.types.errors import ErrorCode, RunlaneError


@dataclass(frozen=True, slots=True)
class StoreScope:
    """Storage calls scoped to ``environment``, timed by ``clock``."""

    storage: Storage
    environment: str
    clock: Clock

    def now(self) -> datetime:
        """The scope's current time (aware UTC)."""
        return self.clock.now()

    def require(self, capability: str) -> None:
        """Raise CAPABILITY_UNSUPPORTED unless the storage promises ``capability``."""
        if not getattr(self.storage.capabilities, capability):
            raise RunlaneError(
                ErrorCode.CAPABILITY_UNSUPPORTED,
                f"this lane's storage does not support {capability.replace('_', ' ')}.",
                meta={"capability": capability},
            )

    def messages(self) -> StoresMessages:
        """The storage's topic operations; CAPABILITY_UNSUPPORTED unless it stores messages."""
        self.require("stores_messages")
        return cast(StoresMessages, self.storage)
