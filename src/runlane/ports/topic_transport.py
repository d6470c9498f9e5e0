"""The topic transport protocol: where a brokered topic's messages go instead of storage.

A stored topic's publish writes the message and its delivery runs in storage. A
topic bound to a topic transport (SNS today) is *brokered*: the runtime validates
the publish and hands it to the transport, which sends it to the broker and
writes nothing to storage; the broker fans it out to the subscriptions.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:  # the protocol needs no topic code at run time (lanes import it)
    from runlane.topics.definitions import SubscriptionDef, TopicDef


@dataclass(frozen=True, slots=True)
class TopicPublished:
    """What a brokered publish returns; the runtime turns it into its ``PublishReceipt``
    (``duplicate=False``, ``runs=[]``, ``sequence=None``)."""

    message_id: str
    topic: str
    published_at: datetime
    #: The broker's id for the publish (SNS ``MessageId``).
    provider_message_id: str | None


@dataclass(frozen=True, slots=True)
class BrokeredCounts:
    """A brokered subscription's approximate numbers, read from the broker."""

    #: Messages waiting to be received.
    waiting: int
    #: Received and not settled yet (or hidden for a retry).
    running: int
    #: Messages in the subscription's dead-letter queue.
    dead_lettered: int


class BrokeredDeadLetter(Protocol):
    """A dead letter a broker keeps; ``fields()`` gives the runtime ``DeadLetter``'s fields."""

    def fields(self) -> dict[str, Any]:
        """``id``, ``subscription``, ``topic``, ``key``, ``reason``, ``failure``, ``attempt``,
        ``replays``, ``dead_lettered_at``, ``blocks_key`` and ``message``."""
        ...


@runtime_checkable
class TopicTransport(Protocol):
    """A broker that carries some topics of a runtime, and operates their subscriptions."""

    name: str

    def carries(self, topic: TopicDef | str) -> bool:
        """Whether ``topic`` is brokered by this transport."""
        ...

    def carries_subscription(self, subscription: SubscriptionDef | str) -> bool:
        """Whether ``subscription`` is a subscription of a topic brokered here."""
        ...

    def check_registration(
        self,
        *,
        topics: Sequence[TopicDef],
        subscriptions: Sequence[SubscriptionDef],
        task_ids: Collection[str] = (),
    ) -> frozenset[str]:
        """Check the bindings against what the runtime registers (``CONFIGURATION_INVALID``);
        return the names of the topics this transport carries."""
        ...

    async def open(self) -> None:
        """Prepare for publishing (no provider call is required)."""
        ...

    async def close(self) -> None:
        """Release what :meth:`open` prepared."""
        ...

    async def publish_message(
        self,
        topic: TopicDef | str,
        payload: Any = None,
        *,
        environment: str,
        now: datetime,
        attributes: Mapping[str, str] | None = None,
        message_id: str | None = None,
        deduplication_key: str | None = None,
        trace_carrier: Mapping[str, str] | None = None,
        connection: Any = None,
        max_payload_bytes: int = ...,
    ) -> TopicPublished:
        """Validate (contract 5.4.1, in order) and publish one message of a brokered topic."""
        ...

    async def list_dead_letters(
        self, subscription: SubscriptionDef | str, *, key: str | None = None, limit: int = 50
    ) -> Sequence[BrokeredDeadLetter]:
        """Dead letters of a brokered subscription, oldest first (best effort)."""
        ...

    async def get_dead_letter(
        self, dead_letter_id: str, *, subscription: SubscriptionDef | str
    ) -> BrokeredDeadLetter:
        """One dead letter of a brokered subscription, or ``DEAD_LETTER_NOT_FOUND``."""
        ...

    async def replay_dead_letter(
        self,
        dead_letter_id: str,
        *,
        subscription: SubscriptionDef | str,
        reason: str | None = None,
        actor: str | None = None,
    ) -> None:
        """Deliver the dead letter to its subscription again, with a fresh budget."""
        ...

    async def discard_dead_letter(
        self,
        dead_letter_id: str,
        *,
        subscription: SubscriptionDef | str,
        reason: str,
        actor: str | None = None,
    ) -> None:
        """Drop the dead letter."""
        ...

    async def subscription_counts(self, subscription: SubscriptionDef | str) -> BrokeredCounts:
        """The subscription's approximate waiting, in-flight and dead-lettered numbers."""
        ...
