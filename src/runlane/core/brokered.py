"""Brokered topics (contract 5.11): topics a lane's topic transport carries instead of storage.

A topic bound to the lane's topic transport (SNS) is published to the broker and
never written to storage; the broker fans it out to its subscriptions' own queues
and keeps their dead letters. :func:`split_topics` sorts a runtime's topics at
``Runlane(...)``: the transport checks its bindings against the registered
definitions and names the topics it carries; the rest stay for storage
(``register_topics``). :class:`BrokeredTopics` is what ``rl.publish``,
``rl.dead_letters`` and ``rl.subscriptions`` call for the brokered ones, through
the :class:`~runlane.ports.topic_transport.TopicTransport` protocol only.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from runlane.ports.topic_transport import TopicTransport
from runlane.topics.definitions import SubscriptionDef, TopicDef
from runlane.topics.records import DeadLetter, PublishReceipt, SubscriptionStats
from runlane.topics.registration import topic_definitions
from runlane.topics.states import check_operator_reason
from runlane.types.errors import RunlaneError, configuration_error
from runlane.types.ids import validate_optional_identifier
from runlane.types.runs import Page


@dataclass(frozen=True, slots=True)
class TopicSplit:
    """A runtime's topics and subscriptions, sorted between storage and the broker."""

    stored_topics: list[TopicDef]
    stored_subscriptions: list[SubscriptionDef]
    #: ``None`` when the lane has no topic transport.
    brokered: BrokeredTopics | None


def split_topics(
    transport: TopicTransport | None,
    *,
    topics: object,
    subscriptions: object,
    task_ids: Collection[str],
) -> TopicSplit:
    """Check ``Runlane(topics=, subscriptions=)`` against ``transport``'s bindings and split them.

    The transport refuses what its bindings break (``CONFIGURATION_INVALID``:
    ORDERED on SNS, EXCLUSIVE on a standard topic, a subscription without a binding,
    ...). Storage then registers only the other topics and their subscriptions.
    """
    topic_list, subscription_list = topic_definitions(topics, subscriptions)
    if transport is None:
        return TopicSplit(topic_list, subscription_list, None)
    carried = transport.check_registration(
        topics=topic_list, subscriptions=subscription_list, task_ids=task_ids
    )
    if not carried:
        return TopicSplit(topic_list, subscription_list, None)
    brokered = BrokeredTopics(
        transport,
        topics={t.name: t for t in topic_list if t.name in carried},
        subscriptions={s.name: s for s in subscription_list if s.topic.name in carried},
    )
    return TopicSplit(
        [t for t in topic_list if t.name not in carried],
        [s for s in subscription_list if s.topic.name not in carried],
        brokered,
    )


class BrokeredTopics:
    """Publishing to, and operating the subscriptions of, the topics one transport carries."""

    def __init__(
        self,
        transport: TopicTransport,
        *,
        topics: Mapping[str, TopicDef],
        subscriptions: Mapping[str, SubscriptionDef],
    ) -> None:
        self.transport = transport
        self.topics = dict(topics)
        self.subscriptions = dict(subscriptions)

    def check_lane(self, transport: TopicTransport | None) -> None:
        """A lane bound later (``runlane.testing.on_lane``) must carry the same topics and
        subscriptions; its topic transport then serves them."""
        if transport is self.transport:
            return
        missing = sorted(
            [name for name in self.topics if transport is None or not transport.carries(name)]
            + [
                name
                for name in self.subscriptions
                if transport is None or not transport.carries_subscription(name)
            ]
        )
        if transport is None or missing:
            raise configuration_error(
                f"{missing} are brokered by topic transport {self.transport.name!r}, but the "
                "new lane's topic transport does not carry them; give the lane a topic "
                "transport binding them (topic_transport=).",
                missing=missing,
            )
        self.transport = transport

    def carries(self, topic: object) -> bool:
        """Whether ``topic`` (a definition or name) is one of the brokered topics."""
        name = topic.name if isinstance(topic, TopicDef) else topic
        return isinstance(name, str) and name in self.topics

    def carries_subscription(self, subscription: object) -> bool:
        """Whether ``subscription`` (a definition or name) is on a brokered topic."""
        name = subscription.name if isinstance(subscription, SubscriptionDef) else subscription
        return isinstance(name, str) and name in self.subscriptions

    def resolve_topic(self, topic: object) -> TopicDef:
        """The brokered topic for a definition or name (one :meth:`carries` accepted); a
        differing definition is ``CONFIGURATION_INVALID``."""
        name = topic.name if isinstance(topic, TopicDef) else topic
        assert isinstance(name, str)
        registered = self.topics[name]
        if isinstance(topic, TopicDef) and topic != registered:
            raise configuration_error(
                f"topic {name!r} differs from the registered definition; share one "
                "topic(...) definition.",
                topic=name,
            )
        return registered

    def resolve_subscription(self, subscription: object) -> SubscriptionDef:
        """The brokered subscription for a definition or name (one :meth:`carries_subscription`
        accepted); a differing definition is ``CONFIGURATION_INVALID``."""
        name = subscription.name if isinstance(subscription, SubscriptionDef) else subscription
        assert isinstance(name, str)
        registered = self.subscriptions[name]
        if isinstance(subscription, SubscriptionDef) and subscription != registered:
            raise configuration_error(
                f"subscription {name!r} differs from the registered definition; share one "
                "subscription(...) definition.",
                subscription=name,
            )
        return registered

    async def publish(
        self,
        topic: TopicDef | str,
        payload: Any,
        *,
        environment: str,
        now: datetime,
        attributes: Mapping[str, str] | None,
        message_id: str | None,
        deduplication_key: str | None,
        trace_carrier: Mapping[str, str] | None,
        connection: Any,
        max_payload_bytes: int,
    ) -> PublishReceipt:
        """``rl.publish`` of a brokered topic: the transport validates (5.4.1; no
        ``deduplication_key`` or ``connection`` there) and publishes; nothing is stored."""
        published = await self.transport.publish_message(
            topic,
            payload,
            environment=environment,
            now=now,
            attributes=attributes,
            message_id=message_id,
            deduplication_key=deduplication_key,
            trace_carrier=trace_carrier,
            connection=connection,
            max_payload_bytes=max_payload_bytes,
        )
        return PublishReceipt(
            message_id=published.message_id,
            topic=published.topic,
            duplicate=False,
            runs=[],
            published_at=published.published_at,
            sequence=None,
            provider_message_id=published.provider_message_id,
        )

    async def list_dead_letters(
        self,
        subscription: SubscriptionDef | str,
        *,
        topic: str | None,
        key: str | None,
        limit: int,
        cursor: str | None,
    ) -> Page[DeadLetter]:
        """One best-effort scan of the subscription's dead letters (5.11.5): one page,
        ``next_cursor`` always ``None``."""
        sub = self.resolve_subscription(subscription)
        if cursor is not None:
            raise configuration_error(
                f"the dead letters of SNS subscription {sub.name!r} come in one page; this "
                "cursor was not returned for them.",
                subscription=sub.name,
            )
        if topic is not None and topic != sub.topic.name:
            return Page([], None)
        found = await self.transport.list_dead_letters(sub, key=key, limit=limit)
        return Page([DeadLetter(**item.fields()) for item in found], None)

    async def get_dead_letter(
        self, dead_letter_id: str, subscription: SubscriptionDef | str
    ) -> DeadLetter:
        """The dead letter ``dead_letter_id`` of a brokered subscription, if a scan finds it."""
        sub = self.resolve_subscription(subscription)
        found = await self.transport.get_dead_letter(dead_letter_id, subscription=sub)
        return DeadLetter(**found.fields())

    async def replay(
        self,
        dead_letter_id: str,
        subscription: SubscriptionDef | str,
        *,
        reason: str | None,
        actor: str | None,
    ) -> None:
        """Send the dead letter back to its subscription's queue (fresh budget)."""
        check_operator_reason(reason, required=False, action="replay")
        validate_optional_identifier(actor, name="actor")
        sub = self.resolve_subscription(subscription)
        await self.transport.replay_dead_letter(
            dead_letter_id, subscription=sub, reason=reason, actor=actor
        )

    async def discard(
        self,
        dead_letter_id: str,
        subscription: SubscriptionDef | str,
        *,
        reason: str,
        actor: str | None,
    ) -> None:
        """Delete the dead letter from its subscription's dead-letter queue."""
        check_operator_reason(reason, required=True, action="discard")
        validate_optional_identifier(actor, name="actor")
        sub = self.resolve_subscription(subscription)
        await self.transport.discard_dead_letter(
            dead_letter_id, subscription=sub, reason=reason, actor=actor
        )

    async def stats(self, subscription: SubscriptionDef | str) -> SubscriptionStats:
        """The subscription's approximate numbers (5.11.7): no counts per status, no queue."""
        sub = self.resolve_subscription(subscription)
        counts = await self.transport.subscription_counts(sub)
        return SubscriptionStats(
            name=sub.name,
            topic=sub.topic.name,
            mode=sub.mode,
            queue=None,
            counts={},
            halted_keys=0,
            approximate=True,
            totals=(counts.waiting, counts.running, counts.dead_lettered),
        )


def without_subscription(topic: str) -> RunlaneError:
    """``rl.dead_letters.list(topic=<brokered topic>)`` without ``subscription=`` (5.11.7)."""
    return configuration_error(
        f"the dead letters of SNS topic {topic!r} live in each subscription's dead-letter "
        "queue; pass subscription= to list them.",
        topic=topic,
    )
