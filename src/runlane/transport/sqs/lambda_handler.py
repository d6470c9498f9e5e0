"""The AWS Lambda SQS handler: one wakeup per record, partial batch failures reported.

Lambda calls a plain ``handler(event, context)``. The handler runs its
coroutines on one event loop per thread that lives as long as the process, so
a module-level runtime and its connection pool, created on that loop by the
first invocation, are reused by every warm invocation.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from runlane.core.errors import ErrorCode, RunlaneError, configuration_error
from runlane.transport.sqs.delivery import (
    ExecuteDelivery,
    OnDeliveryFailure,
    SqsDeliveryFailure,
    SqsDeliveryFailurePhase,
    WakeupDelivery,
    logger,
    validate_callbacks,
    validate_delivery_options,
)

#: Stop starting records when less than this much invocation time is left...
LAMBDA_DEADLINE_MIN_MARGIN_MS = 2_000
#: ...or less than this share of the time the invocation started with, whichever is larger.
LAMBDA_DEADLINE_MARGIN_FRACTION = 0.10

LambdaHandler = Callable[[Mapping[str, Any], Any], dict[str, list[dict[str, str]]]]

_loops = threading.local()


def lambda_event_loop() -> asyncio.AbstractEventLoop:
    """This thread's long-lived handler loop (created on first use, never closed)."""
    loop: asyncio.AbstractEventLoop | None = getattr(_loops, "loop", None)
    if loop is None or loop.is_closed():
        loop = asyncio.new_event_loop()
        _loops.loop = loop
    return loop


def create_sqs_lambda_handler(
    *,
    execute_delivery: ExecuteDelivery,
    fifo: bool = False,
    delivery_options: Mapping[str, Any] | None = None,
    on_delivery_failure: OnDeliveryFailure | None = None,
) -> LambdaHandler:
    """A Lambda handler for SQS events that returns ``{"batchItemFailures": [...]}``.

    Each record body is parsed as a wakeup and passed to
    ``await execute_delivery(message, **delivery_options)``; a call that returns
    acknowledges the record, a raise (or an unparsable body) reports it as a
    failure. Standard queues carry on after a failure; with ``fifo=True`` the
    first failure and every later record are reported, preserving group order.
    Records not started before the invocation deadline margin are reported too.
    Enable ``ReportBatchItemFailures`` on the event source mapping.

    >>> rl = Runlane(lane=postgres_lane(dsn), queues=[main], tasks=[sync_invoices])
    >>> handler = create_sqs_lambda_handler(
    ...     execute_delivery=rl.execute_delivery, delivery_options={"lease_duration": "2m"})
    """
    owner = "create_sqs_lambda_handler"
    validate_callbacks(execute_delivery, on_delivery_failure, owner=owner)
    if not isinstance(fifo, bool):
        raise configuration_error(f"{owner}: fifo must be True or False.")
    delivery = WakeupDelivery(
        execute_delivery,
        validate_delivery_options(delivery_options, owner=owner),
        on_delivery_failure,
    )

    def handler(event: Mapping[str, Any], context: Any) -> dict[str, list[dict[str, str]]]:
        if _running_loop() is not None:
            raise configuration_error(
                f"{owner}: the handler is a plain function for the Lambda runtime; call it "
                "from synchronous code, not from inside a running event loop."
            )
        failed = lambda_event_loop().run_until_complete(
            _deliver_records(delivery, event, context, fifo=fifo)
        )
        return {"batchItemFailures": [{"itemIdentifier": message_id} for message_id in failed]}

    return handler


async def _deliver_records(
    delivery: WakeupDelivery, event: Mapping[str, Any], context: Any, *, fifo: bool
) -> list[str]:
    records = await _records_of(delivery, event)
    deadline = _Deadline.of(context)
    message_ids = [record["messageId"] for record in records]
    failed: list[str] = []
    for index, record in enumerate(records):
        if deadline.reached():
            logger.warning(
                "Lambda deadline near: %d SQS record(s) left for redelivery", len(records) - index
            )
            return failed + message_ids[index:]
        resolved = await delivery.deliver(
            record.get("body"), provider_message_id=record["messageId"], queue_url=None
        )
        if resolved is None:
            if fifo:
                return failed + message_ids[index:]
            failed.append(record["messageId"])
    return failed


async def _records_of(delivery: WakeupDelivery, event: object) -> Sequence[Mapping[str, Any]]:
    records = event.get("Records") if isinstance(event, Mapping) else None
    if not isinstance(records, list):
        raise RunlaneError(
            ErrorCode.ADAPTER_CONTRACT_VIOLATION,
            "the Lambda event has no 'Records' list; is this handler wired to an SQS "
            "event source mapping?",
        )
    for record in records:
        message_id = record.get("messageId") if isinstance(record, Mapping) else None
        if not isinstance(message_id, str) or not message_id:
            # Without a messageId no partial failure can name this record: fail the batch.
            error = RunlaneError(
                ErrorCode.ADAPTER_CONTRACT_VIOLATION,
                "an SQS record has no messageId; the whole batch is failed so SQS retries it.",
            )
            await delivery.report(SqsDeliveryFailure(SqsDeliveryFailurePhase.MESSAGE, error))
            raise error
    return records


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


class _Deadline:
    """When to stop starting records, from ``context.get_remaining_time_in_millis()``."""

    def __init__(self, remaining: Callable[[], int] | None) -> None:
        self._remaining = remaining
        self._margin_ms = (
            max(LAMBDA_DEADLINE_MIN_MARGIN_MS, LAMBDA_DEADLINE_MARGIN_FRACTION * remaining())
            if remaining is not None
            else 0.0
        )

    @classmethod
    def of(cls, context: Any) -> _Deadline:
        remaining = getattr(context, "get_remaining_time_in_millis", None)
        return cls(remaining if callable(remaining) else None)

    def reached(self) -> bool:
        return self._remaining is not None and self._remaining() < self._margin_ms
