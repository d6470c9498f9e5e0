"""The SNS topic transport: publish to SNS, and the dead letters and counts of its subscriptions.

A runtime holds one :class:`SnsTransport` for its brokered topics. Publishing a
topic bound here writes nothing to storage: after the runtime's validation
(5.4.1), :meth:`SnsTransport.publish` sends one SNS ``Publish`` and SNS fans the
message out to each subscription's SQS queue through its filter policy.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from runlane.ports.message_envelope import (
    ATTRIBUTE_DATA_TYPE,
    envelope_text,
    published_size,
)
from runlane.ports.topic_transport import BrokeredCounts, TopicPublished
from runlane.topics.constants import MAX_ENVELOPE_BYTES
from runlane.topics.definitions import SubscriptionDef, TopicDef
from runlane.topics.publishing import ValidatedPublish, validate_publish
from runlane.topics.registration import TopicRegistry
from runlane.transport.sns.bindings import (
    SnsSubscriptionBinding,
    SnsTopicBinding,
    check_subscription_against_topic,
)
from runlane.transport.sns.dead_letters import DeadLetterQueue, SnsDeadLetter
from runlane.transport.sns.registration import check_sns_registration
from runlane.transport.sqs.provider import (
    DEFAULT_MAX_THREADS,
    BlockingCalls,
    check_max_threads,
    is_provider_error,
    provider_call_error,
)
from runlane.transport.sqs.transport import provider_safe_id
from runlane.types.errors import ErrorCode, RunlaneError, configuration_error
from runlane.types.storable_text import unstorable

#: A subscription's approximate numbers, read from SQS queue attributes (5.11.7):
#: ``ApproximateNumberOfMessages`` (waiting) and ``ApproximateNumberOfMessagesNotVisible``
#: (running) of the subscription queue, ``ApproximateNumberOfMessages`` of its DLQ.
SnsQueueCounts = BrokeredCounts


class SnsTransport:
    """Publishes brokered topics to SNS and operates their subscriptions' queues.

    Build it with :func:`sns_transport`. Opening it makes no AWS call; the boto3
    clients belong to the caller.
    """

    def __init__(
        self,
        *,
        client: Any,
        topics: Sequence[SnsTopicBinding],
        subscriptions: Sequence[SnsSubscriptionBinding],
        sqs_client: Any,
        name: str,
        max_threads: int,
    ) -> None:
        self.name = name
        self._client = client
        self._sqs_client = sqs_client
        self._calls = BlockingCalls(max_threads)
        self._topics = {binding.topic.name: binding for binding in topics}
        self._subscriptions = {binding.subscription.name: binding for binding in subscriptions}
        # The brokered topics alone: publish validation needs no subscription queues here,
        # since SNS, not storage, fans the message out.
        self._registry = TopicRegistry(
            topics={name: binding.topic for name, binding in self._topics.items()},
            subscriptions={},
            subscriptions_by_topic={name: () for name in self._topics},
            queues={},
        )

    def __repr__(self) -> str:
        return f"SnsTransport(name={self.name!r}, topics={sorted(self._topics)})"

    @property
    def topics(self) -> Sequence[SnsTopicBinding]:
        """The topic bindings."""
        return list(self._topics.values())

    @property
    def subscriptions(self) -> Sequence[SnsSubscriptionBinding]:
        """The subscription bindings."""
        return list(self._subscriptions.values())

    def carries(self, topic: TopicDef | str) -> bool:
        """Whether ``topic`` is bound to SNS here (it is brokered, not stored)."""
        name = topic.name if isinstance(topic, TopicDef) else topic
        return name in self._topics

    def carries_subscription(self, subscription: SubscriptionDef | str) -> bool:
        """Whether ``subscription`` is bound here (a subscription of a brokered topic)."""
        name = subscription.name if isinstance(subscription, SubscriptionDef) else subscription
        return isinstance(name, str) and name in self._subscriptions

    def check_registration(
        self,
        *,
        topics: Sequence[TopicDef],
        subscriptions: Sequence[SubscriptionDef],
        task_ids: Collection[str] = (),
    ) -> frozenset[str]:
        """The SNS rules checked at ``Runlane(...)`` (see :func:`check_sns_registration`);
        the names of the topics bound to SNS here."""
        return check_sns_registration(
            self, topics=topics, subscriptions=subscriptions, task_ids=task_ids
        )

    def topic_binding(self, topic: TopicDef | str) -> SnsTopicBinding:
        """The binding of a brokered topic (``CONFIGURATION_INVALID`` if it has none)."""
        name = topic.name if isinstance(topic, TopicDef) else topic
        binding = self._topics.get(name)
        if binding is None:
            raise configuration_error(
                f"transport {self.name!r} has no SNS binding for topic {name!r}; add "
                f"sns_topic(...) for it (bound: {sorted(self._topics)}).",
                topic=name,
            )
        return binding

    def subscription_binding(self, subscription: SubscriptionDef | str) -> SnsSubscriptionBinding:
        """The binding of a subscription of a brokered topic, or ``SUBSCRIPTION_NOT_FOUND``."""
        name = subscription.name if isinstance(subscription, SubscriptionDef) else subscription
        binding = self._subscriptions.get(name) if isinstance(name, str) else None
        if binding is None:
            raise RunlaneError(
                ErrorCode.SUBSCRIPTION_NOT_FOUND,
                f"subscription {name!r} has no SNS binding in transport {self.name!r} "
                f"(bound: {sorted(self._subscriptions)}).",
                meta={"subscription": name if isinstance(name, str) else repr(name)},
            )
        return binding

    async def open(self) -> None:
        """Nothing to open: the boto3 clients belong to the caller."""

    async def close(self) -> None:
        """Nothing to close: the boto3 clients belong to the caller."""

    def check_publish_options(
        self, topic: TopicDef | str, *, deduplication_key: object = None, connection: object = None
    ) -> None:
        """5.4.1 check 2 for a brokered topic: no ``deduplication_key``, no ``connection``."""
        name = topic.name if isinstance(topic, TopicDef) else topic
        for option, value in (("deduplication_key", deduplication_key), ("connection", connection)):
            if value is not None:
                raise RunlaneError(
                    ErrorCode.CAPABILITY_UNSUPPORTED,
                    f"topic {name!r} is published to SNS, which has no {option}= (nothing is "
                    "stored to deduplicate by or to commit with); reuse a message_id to make "
                    "retries safe, or keep the topic in storage.",
                    meta={"topic": name, "option": option},
                )

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
        max_payload_bytes: int = MAX_ENVELOPE_BYTES,
    ) -> TopicPublished:
        """``rl.publish`` for a brokered topic: every check of 5.4.1 in order, then :meth:`publish`.

        ``now`` is the runtime clock's time (the message's ``published_at``).
        """
        definition = self._registry.resolve_topic(topic)
        self.check_publish_options(
            definition, deduplication_key=deduplication_key, connection=connection
        )
        validated = validate_publish(
            self._registry,
            definition,
            payload,
            attributes=attributes,
            message_id=message_id,
            trace_carrier=trace_carrier,
            now=now,
            max_payload_bytes=max_payload_bytes,
        )
        return await self.publish(validated, environment=environment)

    async def publish(self, publish: ValidatedPublish, *, environment: str) -> TopicPublished:
        """Send one validated publish to SNS (5.11.3).

        The SNS ``Message`` is the v1 envelope; ``MessageAttributes`` are the
        message's attributes as strings; on a FIFO topic the ``MessageGroupId`` is
        the ``message_group`` attribute's value (the message id when absent) and the
        ``MessageDeduplicationId`` the message id (each replaced by its SHA-256 when
        SNS would refuse it). An envelope over 262,144 bytes is ``PAYLOAD_TOO_LARGE``;
        a retryable SNS failure ``TRANSPORT_UNAVAILABLE`` (publish again with the same
        message id), any other ``TRANSPORT_PUBLISH_FAILED``.
        """
        self.check_publish_options(publish.topic, deduplication_key=publish.deduplication_key)
        binding = self.topic_binding(publish.topic)
        message = replace(publish.message, payload=publish.payload_json)
        if not isinstance(environment, str) or not environment or unstorable(environment):
            raise configuration_error("publish needs the environment's name, a non-empty string.")
        body = envelope_text(message, environment=environment, trace_carrier=publish.trace_carrier)
        size = published_size(body, message.attributes)
        if size > MAX_ENVELOPE_BYTES:
            raise RunlaneError(
                ErrorCode.PAYLOAD_TOO_LARGE,
                f"the message to SNS topic {binding.topic.name!r} is {size} bytes with its "
                f"envelope and attributes; SNS takes at most {MAX_ENVELOPE_BYTES}.",
                meta={"topic": binding.topic.name, "size": size, "limit": MAX_ENVELOPE_BYTES},
            )
        params: dict[str, Any] = {"TopicArn": binding.topic_arn, "Message": body}
        if message.attributes:
            params["MessageAttributes"] = {
                name: {"DataType": ATTRIBUTE_DATA_TYPE, "StringValue": value}
                for name, value in message.attributes.items()
            }
        if binding.fifo:
            group = (
                message.attributes.get(binding.message_group)
                if binding.message_group is not None
                else None
            )
            params["MessageGroupId"] = provider_safe_id(group or message.id)
            params["MessageDeduplicationId"] = provider_safe_id(message.id)
        try:
            response = await self._calls.run(self._client.publish, **params)
        except Exception as error:
            if not is_provider_error(error):
                raise
            raise provider_call_error(
                error,
                service="SNS",
                operation="Publish",
                permanent_code=ErrorCode.TRANSPORT_PUBLISH_FAILED,
                what=f"publishing message {message.id!r} to topic {binding.topic.name!r}",
                topic=binding.topic.name,
                topic_arn=binding.topic_arn,
                message_id=message.id,
            ) from None
        provider_id = response.get("MessageId") if isinstance(response, dict) else None
        return TopicPublished(
            message_id=message.id,
            topic=binding.topic.name,
            published_at=message.published_at,
            provider_message_id=str(provider_id) if provider_id else None,
        )

    def dead_letter_queue(self, subscription: SubscriptionDef | str) -> DeadLetterQueue:
        """The dead-letter operations of one subscription (needs ``sqs_client``)."""
        binding = self.subscription_binding(subscription)
        if self._sqs_client is None:
            raise RunlaneError(
                ErrorCode.CAPABILITY_UNSUPPORTED,
                f"the dead letters of SNS subscription {binding.subscription.name!r} live in "
                f"SQS; pass sqs_client= to sns_transport(...) to read them.",
                meta={"subscription": binding.subscription.name},
            )
        return DeadLetterQueue(binding, self._sqs_client, self._calls)

    async def list_dead_letters(
        self, subscription: SubscriptionDef | str, *, key: str | None = None, limit: int = 50
    ) -> list[SnsDeadLetter]:
        """``rl.dead_letters.list(subscription=...)`` for a brokered subscription (5.11.5)."""
        return await self.dead_letter_queue(subscription).list_all(key=key, limit=limit)

    async def get_dead_letter(
        self, dead_letter_id: str, *, subscription: SubscriptionDef | str
    ) -> SnsDeadLetter:
        """``rl.dead_letters.get(id, subscription=...)``."""
        return await self.dead_letter_queue(subscription).get(dead_letter_id)

    async def replay_dead_letter(
        self,
        dead_letter_id: str,
        *,
        subscription: SubscriptionDef | str,
        reason: str | None = None,
        actor: str | None = None,
    ) -> None:
        """``rl.dead_letters.replay(id, subscription=...)``: back to the subscription queue."""
        await self.dead_letter_queue(subscription).replay(
            dead_letter_id, reason=reason, actor=actor
        )

    async def discard_dead_letter(
        self,
        dead_letter_id: str,
        *,
        subscription: SubscriptionDef | str,
        reason: str,
        actor: str | None = None,
    ) -> None:
        """``rl.dead_letters.discard(id, subscription=..., reason=...)``: delete the copy."""
        await self.dead_letter_queue(subscription).discard(
            dead_letter_id, reason=reason, actor=actor
        )

    async def subscription_counts(self, subscription: SubscriptionDef | str) -> SnsQueueCounts:
        """Approximate waiting, in-flight and dead-lettered numbers of a brokered subscription."""
        queue = self.dead_letter_queue(subscription)  # the same binding and client checks
        binding = queue.binding
        numbers: list[int] = []
        for url, names in (
            (
                binding.queue_url,
                ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
            ),
            (binding.dead_letter_queue_url, ["ApproximateNumberOfMessages"]),
        ):
            try:
                response = await self._calls.call_sqs(
                    self._sqs_client, "get_queue_attributes", QueueUrl=url, AttributeNames=names
                )
            except Exception as error:
                if not is_provider_error(error):
                    raise
                raise provider_call_error(
                    error,
                    operation="GetQueueAttributes",
                    permanent_code=ErrorCode.CONFIGURATION_INVALID,
                    what=f"reading the queues of subscription {binding.subscription.name!r}",
                    subscription=binding.subscription.name,
                    queue_url=url,
                ) from None
            attributes = response.get("Attributes") or {}
            numbers.extend(_whole(attributes.get(name)) for name in names)
        return SnsQueueCounts(waiting=numbers[0], running=numbers[1], dead_lettered=numbers[2])


def sns_transport(
    *,
    client: Any,
    topics: Sequence[SnsTopicBinding],
    subscriptions: Sequence[SnsSubscriptionBinding] = (),
    sqs_client: Any = None,
    name: str = "sns",
    max_threads: int = DEFAULT_MAX_THREADS,
) -> SnsTransport:
    """The SNS transport of a runtime's brokered topics.

    ``client`` is a boto3 SNS client; ``sqs_client`` (a boto3 SQS client) is
    needed for the dead letters and counts of the ``subscriptions``. Every
    subscription registered on a bound topic needs an :func:`sns_subscription`
    binding (checked at ``Runlane(...)``).

    >>> transport = sns_transport(
    ...     client=boto3.client("sns"), sqs_client=boto3.client("sqs"),
    ...     topics=[sns_topic(orders, topic_arn=arn)],
    ...     subscriptions=[sns_subscription(email_customer, queue_url=q, dead_letter_queue_url=d)],
    ... )
    """
    if not callable(getattr(client, "publish", None)):
        raise configuration_error(
            "sns_transport needs a boto3 SNS client, for example boto3.client('sns')."
        )
    if sqs_client is not None and not all(
        callable(getattr(sqs_client, method, None))
        for method in ("receive_message", "send_message", "delete_message", "get_queue_attributes")
    ):
        raise configuration_error(
            "sns_transport sqs_client must be a boto3 SQS client, for example "
            "boto3.client('sqs'), or None."
        )
    topic_bindings = _bindings(topics, SnsTopicBinding, "topics", "sns_topic")
    subscription_bindings = _bindings(
        subscriptions, SnsSubscriptionBinding, "subscriptions", "sns_subscription"
    )
    if not topic_bindings:
        raise configuration_error("sns_transport needs at least one sns_topic(...) binding.")
    by_topic: dict[str, SnsTopicBinding] = {}
    arns: dict[str, str] = {}
    for binding in topic_bindings:
        topic_name = binding.topic.name
        if topic_name in by_topic:
            raise configuration_error(
                f"sns_transport binds topic {topic_name!r} twice; one binding per topic.",
                topic=topic_name,
            )
        if binding.topic_arn in arns:
            raise configuration_error(
                f"sns_transport binds topics {arns[binding.topic_arn]!r} and {topic_name!r} "
                "to one SNS topic; each topic needs its own.",
                topic=topic_name,
            )
        by_topic[topic_name] = binding
        arns[binding.topic_arn] = topic_name
    seen: dict[str, SnsSubscriptionBinding] = {}
    queues: dict[str, str] = {}
    for sub in subscription_bindings:
        sub_name = sub.subscription.name
        if sub_name in seen:
            raise configuration_error(
                f"sns_transport binds subscription {sub_name!r} twice; one binding each.",
                subscription=sub_name,
            )
        topic_binding = by_topic.get(sub.subscription.topic.name)
        if topic_binding is None:
            raise configuration_error(
                f"sns_transport binds subscription {sub_name!r}, but its topic "
                f"{sub.subscription.topic.name!r} has no sns_topic(...) binding.",
                subscription=sub_name,
            )
        if topic_binding.topic != sub.subscription.topic:
            raise configuration_error(
                f"subscription {sub_name!r} names a topic {sub.subscription.topic.name!r} "
                "that differs from the bound definition; share one topic(...) definition.",
                subscription=sub_name,
            )
        check_subscription_against_topic(sub, topic_binding)
        for url in (sub.queue_url, sub.dead_letter_queue_url):
            if url in queues:
                raise configuration_error(
                    f"subscriptions {queues[url]!r} and {sub_name!r} share the queue {url!r}; "
                    "each subscription needs its own queue and dead-letter queue.",
                    subscription=sub_name,
                )
            queues[url] = sub_name
        seen[sub_name] = sub
    if not isinstance(name, str) or not name.strip():
        raise configuration_error("sns_transport name must be a non-empty string.")
    return SnsTransport(
        client=client,
        topics=topic_bindings,
        subscriptions=subscription_bindings,
        sqs_client=sqs_client,
        name=name,
        max_threads=check_max_threads(max_threads, "sns_transport"),
    )


def _bindings(value: object, kind: type[Any], option: str, builder: str) -> list[Any]:
    if isinstance(value, kind | str | bytes) or not isinstance(value, Sequence):
        raise configuration_error(f"sns_transport {option} must be a list of {builder}(...).")
    for item in value:
        if not isinstance(item, kind):
            raise configuration_error(
                f"sns_transport {option} must hold {builder}(...) bindings, "
                f"got {type(item).__name__}."
            )
    return list(value)


def _whole(value: object) -> int:
    try:
        return max(0, int(str(value)))
    except ValueError:
        return 0
