"""Amazon SQS wakeups for runlane (``pip install 'runlane[sqs]'``).

>>> from runlane.sqs import sqs_queue, sqs_transport, create_sqs_delivery_consumer
"""

from runlane.transport.sqs import *  # noqa: F403
from runlane.transport.sqs import __all__ as __all__
