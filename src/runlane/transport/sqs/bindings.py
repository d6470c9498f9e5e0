"""Queue bindings: which SQS queue (by URL or name) carries the wakeups of a runlane queue.

A :class:`QueueDef` owns routing and durable capacity; its binding owns the
provider side: the queue URL or name, and FIFO behaviour. Everything is checked
when the binding is built, so bad configuration fails at the call site.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from urllib.parse import urlsplit

from runlane.model.queue_defs import QueueDef
from runlane.types.errors import configuration_error

#: SQS queue names: 1-80 characters of letters, digits, ``-`` and ``_`` (``.fifo`` counts).
_QUEUE_NAME = re.compile(r"^[A-Za-z0-9_-]{1,75}(\.fifo)?$|^[A-Za-z0-9_-]{1,80}$")
_ACCOUNT_ID = re.compile(r"^\d{12}$")
FIFO_SUFFIX = ".fifo"


class SqsFifoMessageGroup(StrEnum):
    """Which ``MessageGroupId`` a FIFO wakeup gets."""

    #: One group per run: a stuck run never blocks other runs of the queue (the default).
    RUN = "run"
    #: One group for the whole runlane queue: provider-ordered, one wakeup at a time.
    QUEUE = "queue"


class SqsFifoDeduplication(StrEnum):
    """How a FIFO wakeup is deduplicated by SQS."""

    #: ``MessageDeduplicationId`` derived from the outbox id (the default).
    OUTBOX = "outbox"
    #: No ``MessageDeduplicationId``: the queue must have content-based deduplication on.
    CONTENT_BASED = "content_based"


@dataclass(frozen=True, slots=True)
class SqsFifo:
    """FIFO options of a binding; their presence says the SQS queue is a FIFO queue.

    >>> SqsFifo(message_group=SqsFifoMessageGroup.QUEUE)
    """

    message_group: SqsFifoMessageGroup = SqsFifoMessageGroup.RUN
    deduplication: SqsFifoDeduplication = SqsFifoDeduplication.OUTBOX

    def __post_init__(self) -> None:
        for option, value, enum in (
            ("message_group", self.message_group, SqsFifoMessageGroup),
            ("deduplication", self.deduplication, SqsFifoDeduplication),
        ):
            if not isinstance(value, enum):
                choices = ", ".join(f"{enum.__name__}.{member.name}" for member in enum)
                raise configuration_error(
                    f"SqsFifo {option} must be one of {choices}, got {value!r}."
                )


@dataclass(frozen=True, slots=True)
class SqsQueueBinding:
    """A runlane queue bound to one SQS queue. Build it with :func:`sqs_queue`."""

    queue: QueueDef
    queue_url: str | None
    queue_name: str | None
    queue_owner_aws_account_id: str | None
    fifo: SqsFifo | None

    @property
    def provider_reference(self) -> str:
        """The URL or name this binding was configured with (for messages and meta)."""
        return self.queue_url or self.queue_name or ""


def sqs_queue(
    queue_def: QueueDef,
    *,
    queue_url: str | None = None,
    queue_name: str | None = None,
    queue_owner_aws_account_id: str | None = None,
    fifo: SqsFifo | None = None,
) -> SqsQueueBinding:
    """Bind a runlane queue to an SQS queue given by exactly one of URL or name.

    ``queue_url`` skips any lookup; ``queue_name`` is resolved with
    ``GetQueueUrl`` once and cached (``queue_owner_aws_account_id`` names the
    owning account of a queue in another account). A queue whose URL or name
    ends in ``.fifo`` needs ``fifo=SqsFifo(...)``, and ``fifo`` needs such a queue.

    >>> sqs_queue(emails, queue_name="runlane-emails-production")
    >>> sqs_queue(ordered, queue_url=url, fifo=SqsFifo(message_group=SqsFifoMessageGroup.QUEUE))
    """
    if not isinstance(queue_def, QueueDef):
        raise configuration_error(
            f"sqs_queue needs a queue(...) definition, got {type(queue_def).__name__}."
        )
    label = f"sqs_queue({queue_def.name!r})"
    if (queue_url is None) == (queue_name is None):
        raise configuration_error(f"{label}: pass exactly one of queue_url or queue_name.")
    if queue_url is not None:
        if queue_owner_aws_account_id is not None:
            raise configuration_error(
                f"{label}: queue_owner_aws_account_id only applies to queue_name "
                "(a queue URL already names its account)."
            )
        last_segment = validate_queue_url(queue_url, label)
    else:
        last_segment = _validate_queue_name(queue_name, label)
        if queue_owner_aws_account_id is not None and (
            not isinstance(queue_owner_aws_account_id, str)
            or not _ACCOUNT_ID.match(queue_owner_aws_account_id)
        ):
            raise configuration_error(
                f"{label}: queue_owner_aws_account_id must be a 12-digit AWS account id."
            )
    if fifo is not None and not isinstance(fifo, SqsFifo):
        raise configuration_error(f"{label}: fifo must be SqsFifo(...) or None.")
    is_fifo_queue = last_segment.endswith(FIFO_SUFFIX)
    if is_fifo_queue and fifo is None:
        raise configuration_error(
            f"{label}: {last_segment!r} is a FIFO queue; pass fifo=SqsFifo(...) to say how "
            "wakeups are grouped and deduplicated."
        )
    if fifo is not None and not is_fifo_queue:
        raise configuration_error(
            f"{label}: fifo options need a FIFO queue, whose name ends in '.fifo'; "
            f"{last_segment!r} does not."
        )
    return SqsQueueBinding(
        queue=queue_def,
        queue_url=queue_url,
        queue_name=queue_name,
        queue_owner_aws_account_id=queue_owner_aws_account_id,
        fifo=fifo,
    )


def validate_queue_url(url: object, label: str) -> str:
    """Check an SQS queue URL; return its last path segment (the queue name)."""
    if not isinstance(url, str) or not url.strip():
        raise configuration_error(f"{label}: queue_url must be a non-empty string.")
    parts = urlsplit(url)
    last_segment = parts.path.rstrip("/").rsplit("/", 1)[-1]
    if parts.scheme not in ("http", "https") or not parts.netloc or not last_segment:
        raise configuration_error(
            f"{label}: queue_url must be an http(s) SQS queue URL such as "
            "'https://sqs.us-east-1.amazonaws.com/123456789012/runlane-default'.",
            queue_url=url,
        )
    return last_segment


def _validate_queue_name(name: object, label: str) -> str:
    if not isinstance(name, str) or not _QUEUE_NAME.match(name):
        raise configuration_error(
            f"{label}: queue_name must be an SQS queue name: up to 80 letters, digits, "
            "'-' or '_' (a FIFO queue ends in '.fifo').",
            queue_name=name,
        )
    return name
