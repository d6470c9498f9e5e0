"""The SNS rules checked at ``Runlane(...)`` (contract 5.11.1), against what the runtime registers.

:func:`sns_transport` already checked what the bindings say among themselves
(FIFO agreement, EXCLUSIVE keys, ORDERED, ``queue=``, the 12-hour delay cap). What
needs the runtime's registered topics and subscriptions is checked here.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING

from runlane.topics.definitions import SubscriptionDef, TopicDef
from runlane.transport.sns.bindings import check_mode_against_topic, check_subscription_rules
from runlane.types.errors import configuration_error

if TYPE_CHECKING:  # the transport calls this module (check_registration)
    from runlane.transport.sns.transport import SnsTransport


def check_sns_registration(
    transport: SnsTransport | None,
    *,
    topics: Sequence[TopicDef],
    subscriptions: Sequence[SubscriptionDef],
    task_ids: Collection[str] = (),
) -> frozenset[str]:
    """Check the SNS bindings against the registered definitions; return the brokered topics.

    Refused (``CONFIGURATION_INVALID``): a topic or subscription name registered
    twice, or a subscription of a brokered topic named like a task; a binding for a
    topic or subscription the runtime does not register (or registers with another
    definition); a registered subscription of a bound topic without a binding. The
    runtime then registers only the other topics and their subscriptions in storage
    (``register_topics``: brokered ones need no ``stores_messages`` and no queue) and
    publishes the brokered ones through ``transport.publish_message``.
    """
    if transport is None:
        return frozenset()
    registered_topics: dict[str, TopicDef] = {}
    for topic_def in topics:
        if topic_def.name in registered_topics:
            raise configuration_error(
                f"topic name {topic_def.name!r} is registered twice.", topic=topic_def.name
            )
        registered_topics[topic_def.name] = topic_def
    registered_subscriptions: dict[str, SubscriptionDef] = {}
    for sub in subscriptions:
        if sub.name in registered_subscriptions:
            raise configuration_error(
                f"subscription name {sub.name!r} is registered twice.", subscription=sub.name
            )
        if sub.name in task_ids and transport.carries(sub.topic):
            raise configuration_error(
                f"subscription name {sub.name!r} is also a task id; rename one of them.",
                subscription=sub.name,
            )
        registered_subscriptions[sub.name] = sub
    for binding in transport.topics:
        name = binding.topic.name
        registered = registered_topics.get(name)
        if registered is None:
            raise configuration_error(
                f"transport {transport.name!r} binds topic {name!r} to SNS, but the runtime does "
                "not register it; pass it in Runlane(topics=[...]).",
                topic=name,
            )
        if registered != binding.topic:
            raise configuration_error(
                f"topic {name!r} differs from the definition bound to SNS; share one "
                "topic(...) definition.",
                topic=name,
            )
    for sub_binding in transport.subscriptions:
        name = sub_binding.subscription.name
        registered_sub = registered_subscriptions.get(name)
        if registered_sub is None:
            raise configuration_error(
                f"transport {transport.name!r} binds subscription {name!r}, but the runtime "
                "does not register it; pass it in Runlane(subscriptions=[...]).",
                subscription=name,
            )
        if registered_sub is not sub_binding.subscription and (
            registered_sub != sub_binding.subscription
        ):
            raise configuration_error(
                f"subscription {name!r} differs from the definition bound to SQS; share one "
                "subscription(...) definition.",
                subscription=name,
            )
    bound_subscriptions = {binding.subscription.name for binding in transport.subscriptions}
    for definition in subscriptions:
        if not transport.carries(definition.topic):
            continue
        check_subscription_rules(definition)
        check_mode_against_topic(definition, transport.topic_binding(definition.topic))
        if definition.name not in bound_subscriptions:
            raise configuration_error(
                f"subscription {definition.name!r} is on SNS topic {definition.topic.name!r} "
                "but has no sns_subscription(...) binding naming its SQS queue and "
                "dead-letter queue.",
                subscription=definition.name,
            )
    return frozenset(binding.topic.name for binding in transport.topics)
