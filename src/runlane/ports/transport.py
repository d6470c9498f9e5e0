"""The transport protocol: publish wakeups that say "look at run X", nothing more.

A transport never decides whether a run exists or what state it has; every
delivery re-reads storage and claims a lease before executing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from runlane.model.queue_defs import QueueDef


@dataclass(frozen=True, slots=True)
class DeliveryMessage:
    """What a wakeup carries: enough to find a durable run again."""

    environment: str
    run_id: str
    queue: str
    requested_at: datetime | None = None
    trace_carrier: dict[str, str] | None = None


@dataclass(frozen=True, slots=True)
class WakeupAttempt:
    """One outbox row to publish as one provider message."""

    message: DeliveryMessage
    outbox_id: str


@dataclass(frozen=True, slots=True)
class WakeupPublished:
    """The provider accepted the wakeup."""

    published_at: datetime
    provider_message_id: str | None = None


@dataclass(frozen=True, slots=True)
class PublishFailure:
    """Why one wakeup was not published; provider detail lives in ``meta``."""

    code: str
    message: str
    retryable: bool
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class WakeupFailed:
    """The provider refused this one wakeup (others in the call may have succeeded)."""

    error: PublishFailure


PublishOutcome = WakeupPublished | WakeupFailed


@dataclass(frozen=True, slots=True)
class TransportCapabilities:
    """Honest promises of a transport."""

    durable_delivery: bool
    native_delay: bool
    message_grouping: bool
    ordered_delivery: bool


@runtime_checkable
class Transport(Protocol):
    """What a wakeup transport provides."""

    name: str
    capabilities: TransportCapabilities

    @property
    def queues(self) -> Sequence[QueueDef]:
        """The queue definitions this transport has bindings for."""

    async def open(self) -> None:
        """Prepare clients (called when the lane opens)."""

    async def close(self) -> None:
        """Release clients."""

    async def publish_wakeups(self, attempts: Sequence[WakeupAttempt]) -> list[PublishOutcome]:
        """Publish each attempt; ``outcomes[i]`` describes ``attempts[i]``.

        Per-wakeup refusals are returned as :class:`WakeupFailed`. A failure of
        the whole call raises ``RunlaneError`` (``TRANSPORT_UNAVAILABLE`` when it
        may work later, ``TRANSPORT_PUBLISH_FAILED`` or ``CONFIGURATION_INVALID``
        when it will not).
        """
