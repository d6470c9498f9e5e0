"""The thin Lambda consumer of an SNS subscription's SQS queue (contract 5.11.4).

It runs the subscription's handler with no runtime, lane or database: the SQS
message is the delivery. Acknowledging a record means leaving it out of
``batchItemFailures`` (Lambda then deletes it); a retry hides it for the delay
and reports it; a dead letter sends a copy to the dead-letter queue first and
acknowledges only once the copy is sent.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from functools import partial
from typing import Any

from pydantic import ValidationError

from runlane.model.context import Signal, SignalReason
from runlane.model.handler_calls import HandlerEnds, call_handler
from runlane.model.payloads import validation_problems
from runlane.model.transitions import sanitize_exception
from runlane.ports.message_envelope import SnsEnvelope, parse_sns_envelope
from runlane.topics.constants import RECEIVE_GUARD_EXTRA_ATTEMPTS, SQS_MAX_VISIBILITY_S
from runlane.topics.definitions import SubscriptionDef, SubscriptionMode
from runlane.topics.messages import DeliveryContext, Message
from runlane.topics.outcomes import (
    Complete,
    DeadLetterReason,
    DeadLetterWith,
    DeliveryDecision,
    ReleaseFor,
    RetryAfter,
    decide_delivery,
)
from runlane.transport.sns.bindings import SnsSubscriptionBinding
from runlane.transport.sns.dead_letters import (
    REPLAY_ATTRIBUTE,
    REPLAYS_ATTRIBUTE,
    dead_letter_attributes,
    read_attributes,
)
from runlane.transport.sqs.lambda_handler import LambdaDeadline, lambda_event_loop
from runlane.transport.sqs.provider import BlockingCalls, is_provider_error, provider_call_error
from runlane.transport.sqs.transport import provider_safe_id
from runlane.types.errors import ErrorCode, RunlaneError, configuration_error

logger = logging.getLogger("runlane.sns")

LambdaResponse = dict[str, list[dict[str, str]]]
SnsLambdaHandler = Callable[[Mapping[str, Any], Any], LambdaResponse]

#: ``ctx.heartbeat()`` hides the message this long when the subscription has no timeout.
DEFAULT_HEARTBEAT_VISIBILITY_S = 60
_SQS_BATCH = 10


def create_sns_lambda_handler(
    *, subscription: SnsSubscriptionBinding, client: Any, worker_id: str | None = None
) -> SnsLambdaHandler:
    """A Lambda handler for the SQS queue of one SNS subscription.

    ``client`` is a boto3 SQS client. The handler returns
    ``{"batchItemFailures": [...]}``: enable ``ReportBatchItemFailures`` on the
    event source mapping (FIFO queues: batch size 1 in production). Per record,
    in order: a body that is not an envelope is dead-lettered (``invalid_envelope``);
    a record received more than ``max_attempts + 2`` times is dead-lettered
    unrun (``max_attempts_exceeded``); a message the filter does not match is
    acknowledged; otherwise the handler runs and its outcome settles the record.
    On a FIFO queue, once a record of a message group is not acknowledged, the
    group's later records are released unrun. Records not started before the
    deadline margin are released. Building or calling it loads no database driver.

    >>> handler = create_sns_lambda_handler(
    ...     subscription=sns_subscription(email_customer, queue_url=q, dead_letter_queue_url=d),
    ...     client=boto3.client("sqs"))
    """
    owner = "create_sns_lambda_handler"
    if not isinstance(subscription, SnsSubscriptionBinding):
        raise configuration_error(
            f"{owner}: subscription must be an sns_subscription(...) binding, got "
            f"{type(subscription).__name__}."
        )
    if not all(
        callable(getattr(client, method, None))
        for method in (
            "change_message_visibility",
            "change_message_visibility_batch",
            "send_message",
        )
    ):
        raise configuration_error(
            f"{owner}: client must be a boto3 SQS client, for example boto3.client('sqs')."
        )
    if worker_id is not None and (not isinstance(worker_id, str) or not worker_id.strip()):
        raise configuration_error(f"{owner}: worker_id must be a non-empty string or None.")
    consumer = SnsRecordConsumer(
        subscription,
        client,
        worker_id=worker_id or f"lambda:{os.environ.get('AWS_LAMBDA_FUNCTION_NAME', 'local')}",
    )

    def handler(event: Mapping[str, Any], context: Any) -> LambdaResponse:
        if _running_loop() is not None:
            raise configuration_error(
                f"{owner}: the handler is a plain function for the Lambda runtime; call it "
                "from synchronous code, not from inside a running event loop."
            )
        failed = lambda_event_loop().run_until_complete(consumer.handle(event, context))
        return {"batchItemFailures": [{"itemIdentifier": message_id} for message_id in failed]}

    return handler


class SnsRecordConsumer:
    """Runs one subscription's handler over the SQS records of one invocation."""

    def __init__(self, binding: SnsSubscriptionBinding, client: Any, *, worker_id: str) -> None:
        self.binding = binding
        self._client = client
        self._calls = BlockingCalls()
        self._worker_id = worker_id

    async def handle(self, event: object, context: Any) -> list[str]:
        """The message ids of the records not acknowledged, in record order."""
        records = _records(event)
        deadline = LambdaDeadline.of(context)
        fifo = self.binding.fifo
        unacknowledged: set[str] = set()
        released: list[Mapping[str, Any]] = []
        held_groups: set[str] = set()
        for index, record in enumerate(records):
            group = str(record["attributes"].get("MessageGroupId", "")) if fifo else None
            if group is not None and group in held_groups:
                released.append(record)  # behind an unacknowledged record of its group
                continue
            if deadline.reached():
                logger.warning(
                    "Lambda deadline near: %d SQS record(s) released unrun", len(records) - index
                )
                released.extend(records[index:])
                break
            if not await self._settle(record, deadline):
                unacknowledged.add(record["messageId"])
                if group is not None:
                    held_groups.add(group)
        await self._release(released)
        unacknowledged.update(record["messageId"] for record in released)
        return [r["messageId"] for r in records if r["messageId"] in unacknowledged]

    async def _settle(self, record: Mapping[str, Any], deadline: LambdaDeadline) -> bool:
        """Handle one record; whether it may be acknowledged."""
        sub = self.binding.subscription
        attempt = _receive_count(record)
        try:
            envelope = parse_sns_envelope(record.get("body"))  # type: ignore[arg-type]
        except RunlaneError as error:
            return await self._dead_letter(
                record, DeadLetterReason.INVALID_ENVELOPE.value, sanitize_exception(error), attempt
            )
        if attempt > sub.retry.max_attempts + RECEIVE_GUARD_EXTRA_ATTEMPTS:
            return await self._dead_letter(
                record, DeadLetterReason.MAX_ATTEMPTS_EXCEEDED.value, None, attempt
            )
        if not sub.matches(envelope.message.attributes):
            return True
        decision = await self._run(record, envelope, attempt, deadline)
        if isinstance(decision, Complete):
            return True
        if isinstance(decision, ReleaseFor | RetryAfter):
            await self._hide(record, decision.delay)
            return False
        assert isinstance(decision, DeadLetterWith)
        return await self._dead_letter(record, decision.reason, decision.failure, attempt)

    async def _run(
        self,
        record: Mapping[str, Any],
        envelope: SnsEnvelope,
        attempt: int,
        deadline: LambdaDeadline,
    ) -> DeliveryDecision:
        sub = self.binding.subscription
        policy = sub.retry
        try:
            message = replace(envelope.message, payload=_payload_for(sub, envelope.message))
        except RunlaneError as error:
            return decide_delivery(
                error,
                raised=True,
                failures_so_far=attempt - 1,
                policy=policy,
                describe=sanitize_exception,
            )
        signal = Signal()
        attributes = read_attributes(record.get("messageAttributes"))
        ctx = DeliveryContext(
            run_id=record["messageId"],
            subscription=sub.name,
            queue=self.binding.queue_name,
            attempt=attempt,
            signal=signal,
            trace_carrier=envelope.trace_carrier,
            heartbeat=partial(self._heartbeat, record),
            worker_id=self._worker_id,
            topic=message.topic,
            message_id=message.id,
            key=_key(sub, message),
            is_replay=attributes.get(REPLAY_ATTRIBUTE) == "1",
            max_attempts=policy.max_attempts,
        )
        # The signal is set before the Lambda deadline too, so the handler can stop in time.
        until_margin = deadline.seconds_to_margin()
        timer = (
            asyncio.get_running_loop().call_later(until_margin, signal.set, SignalReason.TIMEOUT)
            if until_margin is not None
            else None
        )
        try:
            ended_with, raised = await call_handler(
                sub.handler,
                (message, ctx),
                is_async=sub.is_async,
                time_limit=sub.timeout,
                signal=signal,
                threads=None,
                subject=sub,
                ends=_ENDS,
            )
        finally:
            if timer is not None:
                timer.cancel()
        return decide_delivery(
            ended_with,
            raised=raised,
            failures_so_far=attempt - 1,
            policy=policy,
            describe=sanitize_exception,
        )

    async def _heartbeat(self, record: Mapping[str, Any]) -> None:
        timeout = self.binding.subscription.timeout
        seconds = math.ceil(timeout) if timeout is not None else DEFAULT_HEARTBEAT_VISIBILITY_S
        await self._sqs(
            "change_message_visibility",
            "extending the visibility of a message (heartbeat)",
            QueueUrl=self.binding.queue_url,
            ReceiptHandle=record["receiptHandle"],
            VisibilityTimeout=min(SQS_MAX_VISIBILITY_S, seconds),
        )

    async def _hide(self, record: Mapping[str, Any], delay: float) -> None:
        """Make the record visible again after ``delay`` (rounded up, at most 12 hours)."""
        seconds = min(SQS_MAX_VISIBILITY_S, max(0, math.ceil(delay)))
        try:
            await self._sqs(
                "change_message_visibility",
                "hiding a message until its retry",
                QueueUrl=self.binding.queue_url,
                ReceiptHandle=record["receiptHandle"],
                VisibilityTimeout=seconds,
            )
        except RunlaneError as error:
            # Still reported: it comes back once the queue's visibility timeout passes.
            logger.warning(
                "SQS message %s: visibility not changed (%s)", record["messageId"], error.code.value
            )

    async def _release(self, records: Sequence[Mapping[str, Any]]) -> None:
        """Make unrun records visible again at once (they are reported as failures too)."""
        for start in range(0, len(records), _SQS_BATCH):
            chunk = records[start : start + _SQS_BATCH]
            entries = [
                {"Id": str(i), "ReceiptHandle": r["receiptHandle"], "VisibilityTimeout": 0}
                for i, r in enumerate(chunk)
            ]
            try:
                await self._sqs(
                    "change_message_visibility_batch",
                    "releasing records unrun",
                    QueueUrl=self.binding.queue_url,
                    Entries=entries,
                )
            except RunlaneError as error:
                logger.warning("%d SQS record(s) not released (%s)", len(chunk), error.code.value)

    async def _dead_letter(
        self, record: Mapping[str, Any], reason: str, failure: Any, attempt: int
    ) -> bool:
        """Copy the record to the dead-letter queue; whether the copy was sent."""
        message_id = record["messageId"]
        body = record.get("body")
        replays = read_attributes(record.get("messageAttributes")).get(REPLAYS_ATTRIBUTE)
        params: dict[str, Any] = {
            "QueueUrl": self.binding.dead_letter_queue_url,
            "MessageBody": body if isinstance(body, str) and body else repr(body),
            "MessageAttributes": dead_letter_attributes(
                reason=reason,
                failure=failure,
                attempt=attempt,
                subscription=self.binding.subscription.name,
                dead_lettered_at=datetime.now(UTC),
                replays=int(replays) if replays and replays.isdigit() else 0,
            ),
        }
        if self.binding.fifo:
            # Its own group: a scan of the dead-letter queue never waits behind a key.
            params["MessageGroupId"] = provider_safe_id(message_id)
            params["MessageDeduplicationId"] = provider_safe_id(f"{message_id}:dl")
        try:
            await self._sqs("send_message", "copying a message to the dead-letter queue", **params)
        except RunlaneError as error:
            logger.warning(
                "SQS message %s: dead-letter copy not sent (%s); left for redelivery",
                message_id,
                error.code.value,
            )
            return False
        return True

    async def _sqs(self, operation: str, what: str, **params: Any) -> dict[str, Any]:
        try:
            return await self._calls.call_sqs(self._client, operation, **params)
        except Exception as error:
            if not is_provider_error(error):
                raise
            raise provider_call_error(
                error,
                operation="".join(part.title() for part in operation.split("_")),
                permanent_code=ErrorCode.TRANSPORT_PUBLISH_FAILED,
                what=what,
                subscription=self.binding.subscription.name,
                queue_url=params.get("QueueUrl"),
            ) from None


def _returned(sub: SubscriptionDef, value: object) -> tuple[object, bool]:
    return value, False


def _raised(sub: SubscriptionDef, error: BaseException) -> tuple[object, bool]:
    # A CancelledError the handler raised on its own (call_handler lets a cancellation
    # of the invocation itself propagate) fails its record only, as a worker counts it
    # as the handler's failure: the batch's other records keep their outcomes.
    return error, True


def _timed_out(sub: SubscriptionDef, time_limit: float) -> tuple[object, bool]:
    timeout = RunlaneError(
        ErrorCode.TASK_TIMEOUT,
        f"subscription {sub.name!r} ran longer than its {time_limit:g}s time limit.",
        retryable=True,
    )
    return timeout, True


#: A handler's end as ``(what it returned or raised, whether it raised)``.
_ENDS: HandlerEnds[SubscriptionDef, tuple[object, bool]] = HandlerEnds(
    returned=_returned, raised=_raised, timed_out=_timed_out
)


def _payload_for(sub: SubscriptionDef, message: Message[Any]) -> Any:
    """The payload the handler gets: validated against the topic schema, as at publish."""
    schema = sub.topic.schema
    if schema is None:
        return message.payload
    try:
        return schema.model_validate(message.payload)
    except (ValidationError, ValueError, TypeError, RecursionError) as error:
        problems = (
            "; ".join(validation_problems(error))
            if isinstance(error, ValidationError)
            else type(error).__name__
        )
        raise RunlaneError(
            ErrorCode.PAYLOAD_INVALID,
            f"the payload of message {message.id!r} does not fit topic "
            f"{sub.topic.name!r}'s schema: {problems}",
            meta={"message_id": message.id, "topic": sub.topic.name},
        ) from None


def _key(sub: SubscriptionDef, message: Message[Any]) -> str | None:
    if sub.mode is SubscriptionMode.NONE or not isinstance(sub.key, str):
        return None
    return message.attributes.get(sub.key)


def _records(event: object) -> list[Mapping[str, Any]]:
    records = event.get("Records") if isinstance(event, Mapping) else None
    if not isinstance(records, list):
        raise RunlaneError(
            ErrorCode.ADAPTER_CONTRACT_VIOLATION,
            "the Lambda event has no 'Records' list; is this handler wired to the SQS queue "
            "of an SNS subscription through an event source mapping?",
        )
    for record in records:
        if (
            not isinstance(record, Mapping)
            or not isinstance(record.get("messageId"), str)
            or not record["messageId"]
            or not isinstance(record.get("receiptHandle"), str)
            or not isinstance(record.get("attributes"), Mapping)
            or _receive_count(record) < 1
        ):
            # A partial failure could not name it, nor could it be hidden or copied.
            raise RunlaneError(
                ErrorCode.ADAPTER_CONTRACT_VIOLATION,
                "an SQS record lacks its messageId, receiptHandle or ApproximateReceiveCount; "
                "the whole batch is failed so SQS delivers it again.",
            )
    return records


def _receive_count(record: Mapping[str, Any]) -> int:
    attributes = record.get("attributes")
    value = attributes.get("ApproximateReceiveCount") if isinstance(attributes, Mapping) else None
    try:
        return int(str(value))
    except ValueError:
        return 0


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
