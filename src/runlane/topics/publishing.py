"""Publish validation and the pure rules of deduplication and message ids (contract 5.4).

:func:`validate_publish` runs every check of 5.4.1 that needs no storage, in the
contract's order (the first failure wins), and returns what 5.4.2 writes: the
message and, per matching subscription in registration order, its delivery's
queue, mode and key. Storage then applies deduplication (:func:`is_within_window`)
and message-id reuse (:func:`check_envelope_reuse` on :func:`envelope_of`) in the
publish transaction.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from runlane.model.definitions import TaskDef
from runlane.model.payloads import DEFAULT_MAX_PAYLOAD_BYTES, prepare_payload
from runlane.model.queue_defs import QueueDef
from runlane.topics.attributes import validate_attributes
from runlane.topics.constants import MAX_KEY_LENGTH
from runlane.topics.definitions import SubscriptionDef, SubscriptionMode, TopicDef
from runlane.topics.messages import Message
from runlane.topics.registration import TopicRegistry
from runlane.types.carriers import validate_trace_carrier
from runlane.types.errors import ErrorCode, RunlaneError
from runlane.types.ids import new_run_id, validate_optional_identifier
from runlane.types.retry import DEFAULT_RETRY_POLICY
from runlane.types.storable_text import unstorable


@dataclass(frozen=True, slots=True)
class PlannedDelivery:
    """One delivery run a publish creates: ``task_id`` is the subscription's name."""

    subscription: SubscriptionDef
    queue: QueueDef
    mode: SubscriptionMode
    #: ``None`` for NONE subscriptions and keyless deliveries.
    key: str | None


@dataclass(frozen=True, slots=True)
class ValidatedPublish:
    """A publish that passed every check storage is not needed for."""

    topic: TopicDef
    #: The message as handlers' key functions saw it (``sequence`` is drawn by storage).
    message: Message[Any]
    #: Whether the producer chose the id (then a reuse is checked, 5.4.4).
    message_id_given: bool
    #: The payload as JSON, and its text, as storage keeps it.
    payload_json: Any
    payload_text: str
    deduplication_key: str | None
    trace_carrier: dict[str, str] | None
    deliveries: tuple[PlannedDelivery, ...]

    @property
    def lock_keys(self) -> list[tuple[str, str]]:
        """The (subscription, key) pairs to lock before drawing the sequence, sorted (5.7.4)."""
        return sorted({(d.subscription.name, d.key) for d in self.deliveries if d.key is not None})


def validate_publish(
    registry: TopicRegistry,
    topic: TopicDef | str,
    payload: Any = None,
    *,
    attributes: Mapping[str, str] | None = None,
    message_id: str | None = None,
    deduplication_key: str | None = None,
    trace_carrier: Mapping[str, str] | None = None,
    now: datetime,
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
) -> ValidatedPublish:
    """Check a publish (5.4.1 checks 1-5) and plan its deliveries; nothing is written.

    An exception raised by a subscription's key function propagates unchanged.
    """
    definition = registry.resolve_topic(topic)
    validate_optional_identifier(message_id, name="message_id")
    validate_optional_identifier(deduplication_key, name="deduplication_key")
    carrier = validate_trace_carrier(trace_carrier)
    checked_attributes = validate_attributes(attributes)
    value, payload_json, payload_text = _prepare_payload(definition, payload, max_payload_bytes)
    message: Message[Any] = Message(
        id=message_id if message_id is not None else new_run_id(),
        topic=definition.name,
        payload=value,
        attributes=checked_attributes,
        published_at=now,
        sequence=None,
    )
    deliveries = []
    for sub in registry.subscriptions_by_topic.get(definition.name, ()):
        if not sub.matches(checked_attributes):
            continue
        deliveries.append(
            PlannedDelivery(sub, registry.queues[sub.name], sub.mode, delivery_key(sub, message))
        )
    return ValidatedPublish(
        topic=definition,
        message=message,
        message_id_given=message_id is not None,
        payload_json=payload_json,
        payload_text=payload_text,
        deduplication_key=deduplication_key,
        trace_carrier=carrier,
        deliveries=tuple(deliveries),
    )


def delivery_key(sub: SubscriptionDef, message: Message[Any]) -> str | None:
    """The key of ``sub``'s delivery of ``message`` (5.2.2), or ``PAYLOAD_INVALID``.

    NONE subscriptions have none; an absent attribute or a function returning
    ``None`` makes the delivery keyless.
    """
    if sub.mode is SubscriptionMode.NONE or sub.key is None:
        return None
    value = message.attributes.get(sub.key) if isinstance(sub.key, str) else sub.key(message)
    if value is None:
        return None
    problem = key_problem(value)
    if problem is not None:
        raise RunlaneError(
            ErrorCode.PAYLOAD_INVALID,
            f"subscription {sub.name!r}: the message's key {problem}; fix the key "
            "function or the attribute it reads.",
            meta={"subscription": sub.name},
        )
    return str(value)


def key_problem(value: object) -> str | None:
    """Why ``value`` cannot be a delivery key (``None`` if it can)."""
    if not isinstance(value, str):
        return f"must be a string or None, got {type(value).__name__}"
    if not 1 <= len(value) <= MAX_KEY_LENGTH:
        return f"must be 1-{MAX_KEY_LENGTH} characters long, got {len(value)}"
    problem = unstorable(value)
    return None if problem is None else f"must not contain {problem}"


def is_within_window(original_published_at: datetime, window: float, now: datetime) -> bool:
    """Whether a deduplication entry made at ``original_published_at`` still holds at ``now``.

    The window is measured from the original's ``published_at`` on the runtime
    clock; at exactly ``window`` seconds the key is free again (5.4.3).
    """
    return now - original_published_at < timedelta(seconds=window)


def canonical_envelope(topic: str, payload_json: Any, attributes: Mapping[str, str]) -> str:
    """What two publishes of one message id are compared by (5.4.4): topic, payload and
    attributes as canonical JSON (object keys sorted at every depth, array order kept)."""
    return json.dumps(
        {"topic": topic, "payload": payload_json, "attributes": dict(attributes)},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        allow_nan=False,
    )


def envelope_of(publish: ValidatedPublish) -> str:
    """The canonical envelope of a validated publish: what storage compares when its
    message id is reused (:func:`check_envelope_reuse`)."""
    message = publish.message
    return canonical_envelope(message.topic, publish.payload_json, message.attributes)


def check_envelope_reuse(message_id: str, stored_envelope: str, envelope: str) -> None:
    """Return if ``envelope`` (:func:`canonical_envelope` of a publish of ``message_id``)
    equals the stored message's, else ``MESSAGE_ID_CONFLICT``: what storage checks in
    the publish transaction."""
    if envelope != stored_envelope:
        raise RunlaneError(
            ErrorCode.MESSAGE_ID_CONFLICT,
            f"message id {message_id!r} was already published with another topic, "
            "payload or attributes; reuse an id only to retry the same publish, or pick a new one.",
            meta={"message_id": message_id},
        )


def payload_owner(topic: TopicDef) -> TaskDef[Any]:
    """``topic`` presented as the owner the tasks' payload checks take (its name, its
    schema): publishing and delivering check a message's payload with the same rules."""
    return TaskDef(
        id=topic.name,
        fn=_no_call,
        queue=None,
        schema=topic.schema,
        retry=DEFAULT_RETRY_POLICY,
        timeout=None,
        idempotency_key=None,
        singleton_key=None,
        idempotency_key_ttl=None,
        is_async=False,
    )


def _prepare_payload(topic: TopicDef, payload: Any, max_bytes: int) -> tuple[Any, Any, str]:
    # The payload rules are the tasks' own; they name their owner as a task, so the
    # message is rewritten to say "topic".
    try:
        return prepare_payload(payload_owner(topic), payload, max_bytes)
    except RunlaneError as error:
        needle = f"for task {topic.name!r}"
        if needle in error.message:
            error.message = error.message.replace(needle, f"for topic {topic.name!r}", 1)
            error.args = (error.message,)
        raise


def _no_call(payload: Any, ctx: Any) -> None:
    raise AssertionError("a topic's payload owner is never called")
