"""Amazon SQS as a wakeup transport: publish, Lambda handler and long-running consumer.

Public names are re-exported by :mod:`runlane.sqs`; import them from there.
"""

from runlane.ports.wakeup_envelope import create_wakeup_body as create_sqs_wakeup_body
from runlane.ports.wakeup_envelope import parse_wakeup_body as parse_sqs_wakeup_body
from runlane.transport.sqs.bindings import (
    SqsFifo,
    SqsFifoDeduplication,
    SqsFifoMessageGroup,
    SqsQueueBinding,
    sqs_queue,
)
from runlane.transport.sqs.consumer import SqsDeliveryConsumer, create_sqs_delivery_consumer
from runlane.transport.sqs.delivery import SqsDeliveryFailure, SqsDeliveryFailurePhase
from runlane.transport.sqs.lambda_handler import (
    InvocationMetrics,
    LambdaInvocation,
    create_sqs_lambda_handler,
)
from runlane.transport.sqs.transport import SqsTransport, sqs_transport

__all__ = [
    "InvocationMetrics",
    "LambdaInvocation",
    "SqsDeliveryConsumer",
    "SqsDeliveryFailure",
    "SqsDeliveryFailurePhase",
    "SqsFifo",
    "SqsFifoDeduplication",
    "SqsFifoMessageGroup",
    "SqsQueueBinding",
    "SqsTransport",
    "create_sqs_delivery_consumer",
    "create_sqs_lambda_handler",
    "create_sqs_wakeup_body",
    "parse_sqs_wakeup_body",
    "sqs_queue",
    "sqs_transport",
]
