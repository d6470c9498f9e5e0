"""Amazon SQS wakeups for runlane (``pip install 'runlane[sqs]'``).

>>> from runlane.sqs import sqs_queue, sqs_transport, create_sqs_delivery_consumer
"""

from runlane.transport.sqs import (
    SqsDeliveryConsumer,
    SqsDeliveryFailure,
    SqsDeliveryFailurePhase,
    SqsFifo,
    SqsFifoDeduplication,
    SqsFifoMessageGroup,
    SqsQueueBinding,
    SqsTransport,
    create_sqs_delivery_consumer,
    create_sqs_lambda_handler,
    create_sqs_wakeup_body,
    parse_sqs_wakeup_body,
    sqs_queue,
    sqs_transport,
)

__all__ = [
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
