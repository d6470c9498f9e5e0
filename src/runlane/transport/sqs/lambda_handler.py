"""The AWS Lambda SQS handler: one wakeup per record, partial batch failures reported.

Lambda calls a plain ``handler(event, context)``. The handler runs its
coroutines on one event loop per thread that lives as long as the process, so
a module-level runtime and its connection pool, created on that loop by the
first invocation, are reused by every warm invocation.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

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
from runlane.types.errors import ErrorCode, RunlaneError, configuration_error

#: Stop starting records when less than this much invocation time is left...
LAMBDA_DEADLINE_MIN_MARGIN_MS = 2_000
#: ...or less than this share of the time the invocation started with, whichever is larger.
LAMBDA_DEADLINE_MARGIN_FRACTION = 0.10

LambdaHandler = Callable[[Mapping[str, Any], Any], dict[str, list[dict[str, str]]]]

_loops = threading.local()

#: How executed attempts ended, by the status ``execute_delivery`` left the run in.
_OUTCOME_FIELDS = {
    "succeeded": "succeeded",
    "retrying": "retried",
    "released": "released",
    "failed": "failed",
    "cancelled": "cancelled",
}


@dataclass(slots=True)
class LambdaInvocation:
    """What one invocation of the Lambda handler did, for ``metrics`` (e.g. EMF).

    ``executed`` attempts ended ``succeeded``, ``retried``, ``released``,
    ``failed`` or ``cancelled``; ``ignored`` wakeups were acknowledged without an
    attempt (duplicate, stale, not due, terminal, ...); ``delivery_failures``
    records were returned in ``batchItemFailures`` (any reason), of which
    ``not_started`` were left for redelivery at the deadline margin. ``queues``
    are the runlane queues the parsable wakeups named. ``error`` is set when the
    invocation raised (the whole batch failed).
    """

    records: int = 0
    executed: int = 0
    succeeded: int = 0
    retried: int = 0
    released: int = 0
    failed: int = 0
    cancelled: int = 0
    ignored: int = 0
    delivery_failures: int = 0
    not_started: int = 0
    duration_ms: float = 0.0
    queues: set[str] = field(default_factory=set)
    error: BaseException | None = None

    @property
    def queue(self) -> str:
        """The one queue the wakeups named, ``"mixed"`` if several, ``"unknown"`` if none."""
        if len(self.queues) == 1:
            return next(iter(self.queues))
        return "mixed" if self.queues else "unknown"

    def count(self, message: Any, result: Any) -> None:
        """Count one ``execute_delivery`` call that returned ``result``."""
        self.queues.add(str(message.queue))
        executed = getattr(result, "executed", None)
        if executed is False:
            self.ignored += 1
        elif executed is True:
            self.executed += 1
            status = getattr(getattr(result, "run", None), "status", None)
            name = _OUTCOME_FIELDS.get(str(getattr(status, "value", status)))
            if name is not None:
                setattr(self, name, getattr(self, name) + 1)


@runtime_checkable
class InvocationMetrics(Protocol):
    """Receives one :class:`LambdaInvocation` after each invocation (``runlane.emf``)."""

    def invocation(self, report: LambdaInvocation) -> None:
        """Record one invocation; called even when it raised."""


_invocation: contextvars.ContextVar[LambdaInvocation | None] = contextvars.ContextVar(
    "runlane_lambda_invocation", default=None
)


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
    metrics: InvocationMetrics | None = None,
) -> LambdaHandler:
    """A Lambda handler for SQS events that returns ``{"batchItemFailures": [...]}``.

    Each record body is parsed as a wakeup and passed to
    ``await execute_delivery(message, **delivery_options)``; a call that returns
    acknowledges the record, a raise (or an unparsable body) reports it as a
    failure. Standard queues carry on after a failure; with ``fifo=True`` the
    first failure and every later record are reported, preserving group order.
    Records not started before the invocation deadline margin are reported too.
    Enable ``ReportBatchItemFailures`` on the event source mapping.

    ``metrics`` (for example ``runlane.emf.emf_metrics()``) gets one
    :class:`LambdaInvocation` per invocation, also when the invocation raises.

    >>> rl = Runlane(lane=postgres_lane(dsn), queues=[main], tasks=[sync_invoices])
    >>> handler = create_sqs_lambda_handler(
    ...     execute_delivery=rl.execute_delivery, delivery_options={"lease_duration": "2m"})
    """
    owner = "create_sqs_lambda_handler"
    validate_callbacks(execute_delivery, on_delivery_failure, owner=owner)
    if not isinstance(fifo, bool):
        raise configuration_error(f"{owner}: fifo must be True or False.")
    if metrics is not None and not isinstance(metrics, InvocationMetrics):
        raise configuration_error(
            f"{owner}: metrics must have an invocation(report) method, such as "
            "runlane.emf.emf_metrics()."
        )
    execute = execute_delivery
    if metrics is not None:

        async def counted(message: Any, **options: Any) -> Any:
            result = await execute_delivery(message, **options)
            report = _invocation.get()
            if report is not None:
                report.count(message, result)
            return result

        execute = counted
    delivery = WakeupDelivery(
        execute,
        validate_delivery_options(delivery_options, owner=owner),
        on_delivery_failure,
    )

    def handler(event: Mapping[str, Any], context: Any) -> dict[str, list[dict[str, str]]]:
        if _running_loop() is not None:
            raise configuration_error(
                f"{owner}: the handler is a plain function for the Lambda runtime; call it "
                "from synchronous code, not from inside a running event loop."
            )
        if metrics is None:
            failed = lambda_event_loop().run_until_complete(
                _deliver_records(delivery, event, context, fifo=fifo)
            )
        else:
            failed = _measured(metrics, delivery, event, context, fifo)
        return {"batchItemFailures": [{"itemIdentifier": message_id} for message_id in failed]}

    return handler


def _measured(
    metrics: InvocationMetrics,
    delivery: WakeupDelivery,
    event: Mapping[str, Any],
    context: Any,
    fifo: bool,
) -> list[str]:
    """Deliver and hand ``metrics`` what happened, whether the invocation returned or raised."""
    report = LambdaInvocation()
    records = event.get("Records") if isinstance(event, Mapping) else None
    report.records = len(records) if isinstance(records, list) else 0
    started = time.perf_counter()

    async def invoke() -> list[str]:
        _invocation.set(report)  # this task's own context: gone when it ends
        return await _deliver_records(delivery, event, context, fifo=fifo, report=report)

    try:
        failed = lambda_event_loop().run_until_complete(invoke())
    except BaseException as error:
        report.error = error
        report.delivery_failures = report.records
        raise
    else:
        report.delivery_failures = len(failed)
        return failed
    finally:
        report.duration_ms = (time.perf_counter() - started) * 1000
        try:
            metrics.invocation(report)
        except Exception:
            # Metrics must never change what SQS is told about the batch.
            logger.exception("Lambda invocation metrics could not be written")


async def _deliver_records(
    delivery: WakeupDelivery,
    event: Mapping[str, Any],
    context: Any,
    *,
    fifo: bool,
    report: LambdaInvocation | None = None,
) -> list[str]:
    records = await _records_of(delivery, event)
    deadline = LambdaDeadline.of(context)
    message_ids = [record["messageId"] for record in records]
    failed: list[str] = []
    for index, record in enumerate(records):
        if deadline.reached():
            logger.warning(
                "Lambda deadline near: %d SQS record(s) left for redelivery", len(records) - index
            )
            if report is not None:
                report.not_started = len(records) - index
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


class LambdaDeadline:
    """When to stop starting records, from ``context.get_remaining_time_in_millis()``."""

    def __init__(self, remaining: Callable[[], int] | None) -> None:
        self._remaining = remaining
        self._margin_ms = (
            max(LAMBDA_DEADLINE_MIN_MARGIN_MS, LAMBDA_DEADLINE_MARGIN_FRACTION * remaining())
            if remaining is not None
            else 0.0
        )

    @classmethod
    def of(cls, context: Any) -> LambdaDeadline:
        remaining = getattr(context, "get_remaining_time_in_millis", None)
        return cls(remaining if callable(remaining) else None)

    def reached(self) -> bool:
        """Whether less than the margin is left: start no more records."""
        return self._remaining is not None and self._remaining() < self._margin_ms

    def seconds_to_margin(self) -> float | None:
        """Seconds until the margin is reached (``None`` without a Lambda context)."""
        if self._remaining is None:
            return None
        return max(0.0, (self._remaining() - self._margin_ms) / 1000)
