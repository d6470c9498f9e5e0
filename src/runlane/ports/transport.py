"""The transport protocol: publish wakeups that say "look at run X", nothing more.

A transport never decides whether a run exists or what state it has; every
delivery re-reads storage and claims a lease before executing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable

from runlane.model.queue_defs import QueueDef
from runlane.types.runs import Run


@dataclass(frozen=True, slots=True)
class DeliveryMessage:
    """What a wakeup carries: enough to find a durable run again."""

    environment: str
    run_id: str
    queue: str
    requested_at: datetime | None = None
    trace_carrier: dict[str, str] | None = None


class DeliveryOutcome(StrEnum):
    """Whether a delivery executed an attempt."""

    EXECUTED = "executed"
    IGNORED = "ignored"


class IgnoredReason(StrEnum):
    """Why a wakeup was acknowledged without executing anything (all ack-safe)."""

    NOT_FOUND = "not_found"
    TERMINAL = "terminal"
    NOT_DUE = "not_due"
    ALREADY_LEASED = "already_leased"
    WRONG_QUEUE = "wrong_queue"
    ENVIRONMENT_MISMATCH = "environment_mismatch"
    CAPACITY_UNAVAILABLE = "capacity_unavailable"
    #: A delivery whose key is busy (EXCLUSIVE) or not yet at its head (ORDERED); it
    #: is woken again once claimable.
    KEY_UNAVAILABLE = "key_unavailable"
    #: The run's queue is paused; resuming it requests the run's delivery again.
    QUEUE_PAUSED = "queue_paused"
    #: The run's rate-limit partition has no token now; a delivery request for the
    #: time of its next token was written.
    RATE_LIMITED = "rate_limited"


@dataclass(frozen=True, slots=True)
class DeliveryResult:
    """What ``Runlane.execute_delivery`` did with one wakeup; a consumer acknowledges the
    wakeup either way (a storage or framework failure raises instead)."""

    outcome: DeliveryOutcome
    run: Run | None = None
    reason: IgnoredReason | None = None

    @property
    def executed(self) -> bool:
        """Whether an attempt ran."""
        return self.outcome is DeliveryOutcome.EXECUTED


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
