"""Named limits and defaults of topics and subscriptions (contract section 5.13)."""

from __future__ import annotations

from runlane.types.retry import RetryPolicy

#: Retry policy of a subscription that names none: the work queue's defaults.
DEFAULT_SUBSCRIPTION_RETRY = RetryPolicy(max_attempts=5, initial_delay="10s", max_delay="15m")
DEFAULT_DEDUPLICATION_WINDOW = "24h"
MAX_DEDUPLICATION_WINDOW = "30d"
MAX_ATTRIBUTES = 10
MAX_ATTRIBUTE_VALUE_LENGTH = 256
MAX_FILTER_ATTRIBUTES = 5
MAX_FILTER_VALUES = 50
MAX_KEY_LENGTH = 256
#: Dead-letter reasons are cut to this many characters (ending in an ellipsis).
MAX_DEAD_LETTER_REASON = 500
#: Replay and discard reasons given by operators: longer ones are refused.
MAX_OPERATOR_REASON = 1000
#: SNS (5.11): the whole published envelope, in bytes.
MAX_ENVELOPE_BYTES = 262_144
#: SNS (5.11): SQS caps a message's visibility timeout at 12 hours.
SQS_MAX_VISIBILITY_S = 43_200
#: SNS (5.11): a thin consumer gives up on a message received this many times past max_attempts.
RECEIVE_GUARD_EXTRA_ATTEMPTS = 2
#: SNS (5.11): messages read from a dead-letter queue per scan.
DLQ_SCAN_LIMIT = 100
