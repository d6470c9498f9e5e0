"""SNS bindings: which SNS topic carries a topic, which SQS queues serve a subscription.

Resources are created outside runlane (Terraform, CloudFormation); a binding only
names them. Everything a binding can check on its own is checked where it is
built (``CONFIGURATION_INVALID``); the rules that need the runtime's registered
topics and subscriptions are in :mod:`runlane.transport.sns.registration`.
Building a binding makes no AWS call.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from runlane.topics.attributes import attribute_name_problem
from runlane.topics.constants import SQS_MAX_VISIBILITY_S
from runlane.topics.definitions import SubscriptionDef, SubscriptionMode, TopicDef
from runlane.transport.sqs.bindings import FIFO_SUFFIX, validate_queue_url
from runlane.types.errors import configuration_error

#: ``arn:<partition>:sns:<region>:<account>:<name>``; a name is 1-256 letters, digits,
#: ``-`` or ``_`` (a FIFO topic's ends in ``.fifo``, counted in the 256).
_TOPIC_ARN = re.compile(
    r"^arn:aws(?:-[a-z]+)*:sns:[a-z0-9-]+:\d{12}:"
    r"(?P<name>[A-Za-z0-9_-]{1,251}\.fifo|[A-Za-z0-9_-]{1,256})$"
)


@dataclass(frozen=True, slots=True)
class SnsTopicBinding:
    """A topic bound to one SNS topic. Build it with :func:`sns_topic`."""

    topic: TopicDef
    topic_arn: str
    #: FIFO only: the attribute whose value becomes the ``MessageGroupId``.
    message_group: str | None

    @property
    def fifo(self) -> bool:
        """Whether the SNS topic is a FIFO topic (its ARN ends in ``.fifo``)."""
        return self.topic_arn.endswith(FIFO_SUFFIX)


@dataclass(frozen=True, slots=True)
class SnsSubscriptionBinding:
    """A subscription bound to its SQS queue and dead-letter queue.

    Build it with :func:`sns_subscription`.
    """

    subscription: SubscriptionDef
    queue_url: str
    dead_letter_queue_url: str

    @property
    def fifo(self) -> bool:
        """Whether the subscription's queues are FIFO queues."""
        return _last_segment(self.queue_url).endswith(FIFO_SUFFIX)

    @property
    def queue_name(self) -> str:
        """The SQS queue's name (the last segment of its URL)."""
        return _last_segment(self.queue_url)


def sns_topic(
    topic_def: TopicDef, *, topic_arn: str, message_group: str | None = None
) -> SnsTopicBinding:
    """Bind a topic to the SNS topic ``topic_arn``; publishing it then sends to SNS.

    On a FIFO topic (ARN ending in ``.fifo``), ``message_group`` names the message
    attribute whose value becomes the ``MessageGroupId`` (messages without it get
    their own group); an EXCLUSIVE subscription's key must be that attribute.

    >>> sns_topic(orders, topic_arn="arn:aws:sns:eu-west-1:123456789012:orders.fifo",
    ...           message_group="customer")
    """
    if not isinstance(topic_def, TopicDef):
        raise configuration_error(
            f"sns_topic needs a topic(...) definition, got {type(topic_def).__name__}."
        )
    label = f"sns_topic({topic_def.name!r})"
    if not isinstance(topic_arn, str) or _TOPIC_ARN.match(topic_arn) is None:
        raise configuration_error(
            f"{label}: topic_arn must be an SNS topic ARN such as "
            "'arn:aws:sns:us-east-1:123456789012:orders' (a FIFO topic's name ends in '.fifo').",
            topic=topic_def.name,
            topic_arn=topic_arn if isinstance(topic_arn, str) else repr(topic_arn),
        )
    binding = SnsTopicBinding(topic_def, topic_arn, message_group)
    if message_group is not None:
        if not binding.fifo:
            raise configuration_error(
                f"{label}: message_group only applies to a FIFO topic (an ARN ending in "
                "'.fifo'); a standard topic has no message groups.",
                topic=topic_def.name,
            )
        problem = attribute_name_problem(message_group)
        if problem is not None:
            raise configuration_error(
                f"{label}: message_group names a message attribute, but {problem}.",
                topic=topic_def.name,
            )
    return binding


def sns_subscription(
    subscription_def: SubscriptionDef, *, queue_url: str, dead_letter_queue_url: str
) -> SnsSubscriptionBinding:
    """Bind a subscription of an SNS topic to its SQS queue and dead-letter queue.

    The queue is subscribed to the topic outside runlane, with the filter policy
    :func:`sns_filter_policy` gives, ``FilterPolicyScope = MessageAttributes`` and
    ``RawMessageDelivery = true``. Both queues are FIFO (URL ending in ``.fifo``)
    exactly when the topic is.

    >>> sns_subscription(email_customer, queue_url=queue_url, dead_letter_queue_url=dlq_url)
    """
    if not isinstance(subscription_def, SubscriptionDef):
        raise configuration_error(
            "sns_subscription needs a subscription(...) definition, got "
            f"{type(subscription_def).__name__}."
        )
    name = subscription_def.name
    label = f"sns_subscription({name!r})"
    queue_name = validate_queue_url(queue_url, f"{label} queue_url")
    dead_letter_name = validate_queue_url(dead_letter_queue_url, f"{label} dead_letter_queue_url")
    if queue_url == dead_letter_queue_url:
        raise configuration_error(
            f"{label}: the dead-letter queue must be another queue than the subscription's.",
            subscription=name,
        )
    if queue_name.endswith(FIFO_SUFFIX) != dead_letter_name.endswith(FIFO_SUFFIX):
        raise configuration_error(
            f"{label}: the queue and its dead-letter queue must both be FIFO ('.fifo') "
            f"or both standard; got {queue_name!r} and {dead_letter_name!r}.",
            subscription=name,
        )
    check_subscription_rules(subscription_def)
    return SnsSubscriptionBinding(subscription_def, queue_url, dead_letter_queue_url)


def check_subscription_rules(sub: SubscriptionDef) -> None:
    """The rules of 5.11.1 a subscription definition breaks on any SNS topic."""
    where = f"subscription {sub.name!r} of SNS topic {sub.topic.name!r}"
    if sub.mode is SubscriptionMode.ORDERED:
        raise configuration_error(
            f"{where}: mode 'ordered' needs a stored topic (SNS cannot halt a key on a dead "
            "letter); use 'exclusive' on a FIFO topic, or keep the topic in storage.",
            subscription=sub.name,
        )
    if sub.queue is not None:
        raise configuration_error(
            f"{where}: queue= does not apply; its deliveries go to the SQS queue of its "
            "sns_subscription(...) binding.",
            subscription=sub.name,
        )
    if sub.retry.max_delay > SQS_MAX_VISIBILITY_S:
        raise configuration_error(
            f"{where}: retry.max_delay may be at most 12h (SQS hides a message for at most "
            f"{SQS_MAX_VISIBILITY_S} s), got {sub.retry.max_delay:g} s.",
            subscription=sub.name,
        )


def check_subscription_against_topic(sub: SnsSubscriptionBinding, topic: SnsTopicBinding) -> None:
    """FIFO agreement and the EXCLUSIVE rules between a subscription and its bound topic."""
    definition = sub.subscription
    where = f"subscription {definition.name!r} of SNS topic {topic.topic.name!r}"
    if sub.fifo != topic.fifo:
        kind = "FIFO" if topic.fifo else "standard"
        raise configuration_error(
            f"{where}: the topic is a {kind} topic, so its subscription queues must be "
            f"{kind} queues too (a FIFO queue's URL ends in '.fifo').",
            subscription=definition.name,
        )
    check_mode_against_topic(definition, topic)


def check_mode_against_topic(definition: SubscriptionDef, topic: SnsTopicBinding) -> None:
    """The EXCLUSIVE rules of a subscription on a bound topic (``Runlane(...)`` checks them
    also for a subscription that has no binding yet)."""
    where = f"subscription {definition.name!r} of SNS topic {topic.topic.name!r}"
    if definition.mode is SubscriptionMode.EXCLUSIVE:
        if not topic.fifo:
            raise configuration_error(
                f"{where}: mode 'exclusive' needs a FIFO topic (SNS keeps a key to one "
                "message at a time only through FIFO message groups).",
                subscription=definition.name,
            )
        if not isinstance(definition.key, str) or definition.key != topic.message_group:
            raise configuration_error(
                f"{where}: an exclusive subscription's key must be the topic's message_group "
                f"attribute ({topic.message_group!r}), got {_shown_key(definition.key)}.",
                subscription=definition.name,
            )


def sns_filter_policy(sub: SubscriptionDef | SnsSubscriptionBinding) -> dict[str, list[str]] | None:
    """The SNS filter policy that selects what ``sub``'s filter selects (5.11.2).

    ``None`` without a filter, else ``{attribute: [values...]}`` with the keys
    sorted and the values in the filter's order. Use it with
    ``FilterPolicyScope = MessageAttributes`` and ``RawMessageDelivery = true``:
    SNS then matches exactly as a stored topic does (exact, case-sensitive, a
    missing attribute does not match).

    >>> sns_filter_policy(email_customer)
    {'event': ['created', 'paid']}
    """
    definition = sub.subscription if isinstance(sub, SnsSubscriptionBinding) else sub
    if not isinstance(definition, SubscriptionDef):
        raise configuration_error(
            "sns_filter_policy needs a subscription(...) definition or its binding, got "
            f"{type(sub).__name__}."
        )
    if not definition.filter:
        return None
    return {name: list(definition.filter[name]) for name in sorted(definition.filter)}


def _last_segment(url: str) -> str:
    return url.rstrip("/").rsplit("/", 1)[-1]


def _shown_key(key: object) -> str:
    return repr(key) if isinstance(key, str) or key is None else "a function"
