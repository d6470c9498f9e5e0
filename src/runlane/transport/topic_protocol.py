"""The topic transport protocol: where a brokered topic's messages go instead of storage.

A stored topic's publish writes the message and its delivery runs in storage. A
topic bound to a topic transport (SNS today) is *brokered*: the runtime validates
the publish and hands it to the transport, which sends it to the broker and
writes nothing to storage; the broker fans it out to the subscriptions.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:  # the protocol needs no topic code at run time (lanes import it)
    from runlane.topics.definitions import TopicDef


@dataclass(frozen=True, slots=True)
class TopicPublished:
    """What a brokered publish returns; the runtime turns it into its ``PublishReceipt``
    (``duplicate=False``, ``runs=[]``, ``sequence=None``)."""

    message_id: str
    topic: str
    published_at: datetime
    #: The broker's id for the publish (SNS ``MessageId``).
    provider_message_id: str | None


@runtime_checkable
class TopicTransport(Protocol):
    """A broker that carries some topics of a runtime."""

    name: str

    def carries(self, topic: TopicDef | str) -> bool:
        """Whether ``topic`` is brokered by this transport."""
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
