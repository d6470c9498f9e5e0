"""Topics on Amazon SNS for runlane (``pip install 'runlane[sqs]'``).

>>> from runlane.sns import sns_topic, sns_subscription, sns_transport, create_sns_lambda_handler
"""

from runlane.transport.sns import *  # noqa: F403
from runlane.transport.sns import __all__ as __all__
