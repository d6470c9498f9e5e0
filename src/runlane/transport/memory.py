"""An in-memory transport: records what would be published; for tests and examples."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from runlane.model.queue_defs import QueueDef
from runlane.ports.transport import (
    PublishOutcome,
    TransportCapabilities,
    WakeupAttempt,
    WakeupPublished,
)
from runlane.types.errors import ErrorCode, RunlaneError


class MemoryTransport:
    """Keeps published wakeups in a list. ``fail_with`` makes every publish raise it."""

    name = "memory"
    capabilities = TransportCapabilities(
        durable_delivery=False, native_delay=False, message_grouping=False, ordered_delivery=False
    )

    def __init__(self, queues: Sequence[QueueDef]) -> None:
        self._queues = list(queues)
        self.published: list[WakeupAttempt] = []
        self.fail_with: RunlaneError | None = None

    @property
    def queues(self) -> Sequence[QueueDef]:
        """The queues this transport accepts wakeups for."""
        return self._queues

    async def open(self) -> None:
        """Nothing to open."""

    async def close(self) -> None:
        """Nothing to close."""

    async def publish_wakeups(self, attempts: Sequence[WakeupAttempt]) -> list[PublishOutcome]:
        """Record each attempt (or raise ``fail_with``)."""
        if self.fail_with is not None:
            raise self.fail_with
        names = {q.name for q in self._queues}
        for attempt in attempts:
            if attempt.message.queue not in names:
                raise RunlaneError(
                    ErrorCode.CONFIGURATION_INVALID,
                    f"no binding for queue {attempt.message.queue!r}.",
                )
        self.published.extend(attempts)
        now = datetime.now(UTC)
        return [WakeupPublished(now, f"memory-{a.outbox_id}") for a in attempts]
