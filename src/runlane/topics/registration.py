"""The registration rules of topics and subscriptions (contract 5.3), as pure checks.

``Runlane(..., topics=, subscriptions=)`` calls :func:`register_topics` with the
queues and tasks it registered already; the answer is the lookup the runtime
publishes and executes deliveries with.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from runlane.model.queue_defs import QueueDef
from runlane.topics.definitions import SubscriptionDef, TopicDef
from runlane.types.errors import ErrorCode, RunlaneError, configuration_error

#: An unknown topic or subscription name's error names at most this many look-alikes.
MAX_SUGGESTIONS = 3

D = TypeVar("D")


@dataclass(frozen=True, slots=True)
class TopicRegistry:
    """The topics and subscriptions of one runtime, checked against its queues and tasks."""

    topics: Mapping[str, TopicDef]
    subscriptions: Mapping[str, SubscriptionDef]
    #: Per topic name, its subscriptions in registration order (the order of fan-out).
    subscriptions_by_topic: Mapping[str, tuple[SubscriptionDef, ...]]
    #: Per subscription name, the queue its deliveries go on.
    queues: Mapping[str, QueueDef]

    def resolve_topic(self, topic: object) -> TopicDef:
        """The registered topic for a definition or name (5.4.1 check 1)."""
        name = topic.name if isinstance(topic, TopicDef) else topic
        registered = self.topics.get(name) if isinstance(name, str) else None
        if registered is None:
            raise RunlaneError(
                ErrorCode.TOPIC_NOT_FOUND,
                f"topic {name!r} is not registered with this runtime.{_hint(name, self.topics)} "
                "Pass it in Runlane(topics=[...]).",
                meta={"topic": name if isinstance(name, str) else repr(name)},
            )
        if isinstance(topic, TopicDef) and topic != registered:
            raise configuration_error(
                f"topic {name!r} differs from the registered definition (schema or "
                "deduplication_window); share one topic(...) definition.",
                topic=name,
            )
        return registered

    def resolve_subscription(self, subscription: object) -> SubscriptionDef:
        """The registered subscription for a definition or name."""
        name = subscription.name if isinstance(subscription, SubscriptionDef) else subscription
        registered = self.subscriptions.get(name) if isinstance(name, str) else None
        if registered is None:
            raise RunlaneError(
                ErrorCode.SUBSCRIPTION_NOT_FOUND,
                f"subscription {name!r} is not registered with this runtime."
                f"{_hint(name, self.subscriptions)}",
                meta={"subscription": name if isinstance(name, str) else repr(name)},
            )
        return registered


def register_topics(
    *,
    topics: object,
    subscriptions: object,
    queues: Mapping[str, QueueDef],
    default_queue: QueueDef | None,
    task_ids: Collection[str],
    stores_messages: bool,
) -> TopicRegistry:
    """Check every rule of 5.3 and return the lookup, or raise the first broken rule."""
    topic_list = _definitions(topics, TopicDef, "topics", "topic(...)")
    subscription_list = _definitions(
        subscriptions, SubscriptionDef, "subscriptions", "subscription(...)"
    )
    by_name: dict[str, TopicDef] = {}
    for definition in topic_list:
        if definition.name in by_name:
            raise configuration_error(
                f"topic name {definition.name!r} is registered twice.", topic=definition.name
            )
        by_name[definition.name] = definition
    if by_name and not stores_messages:
        raise RunlaneError(
            ErrorCode.CAPABILITY_UNSUPPORTED,
            "this lane's storage cannot store messages, so it cannot hold topics; use a "
            "SQLite or PostgreSQL lane.",
        )
    registry = TopicRegistry(by_name, {}, {}, {})
    subscriptions_by_name: dict[str, SubscriptionDef] = {}
    fan_out: dict[str, list[SubscriptionDef]] = {name: [] for name in by_name}
    queue_of: dict[str, QueueDef] = {}
    for sub in subscription_list:
        name = sub.name
        if name in subscriptions_by_name:
            raise configuration_error(
                f"subscription name {name!r} is registered twice.", subscription=name
            )
        if name in task_ids:
            raise configuration_error(
                f"subscription name {name!r} is also a task id; a delivery run's task_id is "
                "its subscription's name, so rename one of them.",
                subscription=name,
            )
        registry.resolve_topic(sub.topic)
        queue_of[name] = _queue_for(sub, queues, default_queue)
        subscriptions_by_name[name] = sub
        fan_out[sub.topic.name].append(sub)
    return TopicRegistry(
        topics=by_name,
        subscriptions=subscriptions_by_name,
        subscriptions_by_topic={name: tuple(subs) for name, subs in fan_out.items()},
        queues=queue_of,
    )


def _definitions(value: object, kind: type[D], option: str, builder: str) -> list[D]:
    if isinstance(value, kind | str | bytes | Mapping) or not isinstance(value, Iterable):
        raise configuration_error(f"{option} must be a list of {builder} definitions.")
    items = list(value)
    for item in items:
        if not isinstance(item, kind):
            raise configuration_error(
                f"{option} must hold {builder} definitions, got {type(item).__name__}."
            )
    return items


def _queue_for(
    definition: SubscriptionDef, queues: Mapping[str, QueueDef], default_queue: QueueDef | None
) -> QueueDef:
    purpose = f"subscription {definition.name!r}"
    if definition.queue is None:
        if default_queue is None:
            raise configuration_error(
                f"{purpose} has no queue and the runtime has no default queue; pass "
                "queue=... to subscription(...) or mark one queue default=True.",
                subscription=definition.name,
            )
        return default_queue
    name = definition.queue.name
    registered = queues.get(name)
    if registered is None:
        raise RunlaneError(
            ErrorCode.QUEUE_NOT_FOUND,
            f"{purpose}: queue {name!r} is not registered with this runtime "
            f"(registered: {sorted(queues)}).",
            meta={"queue": name, "subscription": definition.name},
        )
    if definition.queue != registered:
        raise RunlaneError(
            ErrorCode.QUEUE_POLICY_DRIFT,
            f"{purpose}: queue {name!r} has a different policy than the registered one "
            "(concurrency_limit, dispatch_timeout or default differ); share one definition.",
            meta={"queue": name, "subscription": definition.name},
        )
    return registered


def _hint(name: object, known: Iterable[str]) -> str:
    if not isinstance(name, str):
        return ""
    matches = difflib.get_close_matches(name, list(known), n=MAX_SUGGESTIONS)
    return f" Did you mean {' or '.join(map(repr, matches))}?" if matches else ""


def topic_definitions(
    topics: object, subscriptions: object
) -> tuple[list[TopicDef], list[SubscriptionDef]]:
    """``Runlane(topics=, subscriptions=)`` checked to be lists of definitions
    (``CONFIGURATION_INVALID``), before they are split between storage and a broker."""
    return (
        _definitions(topics, TopicDef, "topics", "topic(...)"),
        _definitions(subscriptions, SubscriptionDef, "subscriptions", "subscription(...)"),
    )
