"""Topics on Amazon SNS: bindings, publish, the thin Lambda consumer and SQS dead letters.

Public names are re-exported by :mod:`runlane.sns`; import them from there.
"""

from runlane.transport.sns.bindings import (
    SnsSubscriptionBinding,
    SnsTopicBinding,
    sns_filter_policy,
    sns_subscription,
    sns_topic,
)
from runlane.transport.sns.dead_letters import SnsDeadLetter
from runlane.transport.sns.envelope import (
    SnsEnvelope,
    create_sns_message_body,
    parse_sns_envelope,
    parse_sns_message_body,
)
from runlane.transport.sns.lambda_handler import create_sns_lambda_handler
from runlane.transport.sns.registration import check_sns_registration
from runlane.transport.sns.transport import (
    SnsQueueCounts,
    SnsTransport,
    sns_transport,
)
from runlane.transport.topic_protocol import TopicPublished, TopicTransport

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
