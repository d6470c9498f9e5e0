"""Topics on Amazon SNS: bindings, publish, the thin Lambda consumer and SQS dead letters.

Public names are re-exported by :mod:`runlane.sns`; import them from there.

How a runtime uses it (``lane.topic_transport`` is an :class:`SnsTransport`):

- at ``Runlane(...)``: ``brokered = check_sns_registration(transport, topics=...,
  subscriptions=..., task_ids=...)``, then ``register_topics`` with the other
  topics and their subscriptions only;
- ``rl.publish`` of a brokered topic: ``await transport.publish_message(topic,
  payload, environment=..., now=..., attributes=..., message_id=...,
  deduplication_key=..., trace_carrier=..., connection=...)``, whose
  :class:`TopicPublished` becomes the receipt (``runs=[]``, ``sequence=None``);
- ``rl.dead_letters`` with a brokered ``subscription=``: ``list_dead_letters``,
  ``get_dead_letter``, ``replay_dead_letter``, ``discard_dead_letter`` (each
  :class:`SnsDeadLetter` gives the ``DeadLetter`` fields through ``fields()``);
- ``rl.subscriptions`` of a brokered subscription: ``subscription_counts``.
"""

from runlane.ports.message_envelope import (
    SnsEnvelope,
    create_sns_message_body,
    parse_sns_envelope,
    parse_sns_message_body,
)
from runlane.ports.topic_transport import TopicPublished, TopicTransport
from runlane.transport.sns.bindings import (
    SnsSubscriptionBinding,
    SnsTopicBinding,
    sns_filter_policy,
    sns_subscription,
    sns_topic,
)
from runlane.transport.sns.dead_letters import SnsDeadLetter
from runlane.transport.sns.lambda_handler import create_sns_lambda_handler
from runlane.transport.sns.registration import check_sns_registration
from runlane.transport.sns.transport import (
    SnsQueueCounts,
    SnsTransport,
    sns_transport,
)

__all__ = [
    "SnsDeadLetter",
    "SnsEnvelope",
    "SnsQueueCounts",
    "SnsSubscriptionBinding",
    "SnsTopicBinding",
    "SnsTransport",
    "TopicPublished",
    "TopicTransport",
    "check_sns_registration",
    "create_sns_lambda_handler",
    "create_sns_message_body",
    "parse_sns_envelope",
    "parse_sns_message_body",
    "sns_filter_policy",
    "sns_subscription",
    "sns_topic",
    "sns_transport",
]
