"""The long-running SQS consumer: receive → parse → execute → delete what resolved.

For EC2, ECS, Fargate or any long-lived process where SQS is how work is
acquired. One consumer reads one queue URL; start one per queue. Messages that
fail are left alone: the queue's visibility timeout and redrive policy decide
when they come back or move to a dead-letter queue.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Mapping, Sequence
from enum import StrEnum
from typing import Any

from runlane.model.context import Signal, SignalReason
from runlane.ports.transport import DeliveryMessage
from runlane.transport.sqs.batch_entries import SQS_MAX_BATCH_ENTRIES, match_batch_entries
from runlane.transport.sqs.bindings import FIFO_SUFFIX, validate_queue_url
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
from runlane.transport.sqs.provider import (
    DEFAULT_MAX_THREADS,
    BlockingCalls,
    check_max_threads,
    entry_retryable,
    is_provider_error,
    provider_call_error,
    response_request_id,
)
from runlane.types.backoff import ErrorBackoff
from runlane.types.errors import ErrorCode, RunlaneError, configuration_error

#: Messages per ``ReceiveMessage`` (SQS allows 1-10).
DEFAULT_MAX_NUMBER_OF_MESSAGES = SQS_MAX_BATCH_ENTRIES
#: Long-poll wait per ``ReceiveMessage`` in seconds (SQS allows 0-20).
DEFAULT_WAIT_TIME_SECONDS = 20
MAX_WAIT_TIME_SECONDS = 20
#: SQS bounds a message's visibility timeout to 12 hours.
MAX_VISIBILITY_TIMEOUT_SECONDS = 43_200

_ReceivedWakeup = tuple[Mapping[str, Any], DeliveryMessage]


class _State(StrEnum):
    NEW = "new"
    RUNNING = "running"
    CLOSED = "closed"


class SqsDeliveryConsumer:
    """A receive loop over one SQS queue. Build it with :func:`create_sqs_delivery_consumer`.

    Single-start: ``start()`` is a no-op while running; once stopped (or failed),
    build a new consumer to receive again.
    """

    def __init__(
        self,
        *,
        client: Any,
        queue_url: str,
        execute_delivery: ExecuteDelivery,
        delivery_options: Mapping[str, Any],
        on_delivery_failure: OnDeliveryFailure | None,
        fifo: bool,
        receive_params: Mapping[str, Any],
        max_threads: int = DEFAULT_MAX_THREADS,
    ) -> None:
        self.queue_url = queue_url
        self.fifo = fifo
        #: Set (reason ``SHUTDOWN``) by ``stop()``, or with the forwarded signal's reason;
        #: every delivery gets it as ``signal``, so running tasks see it as ``ctx.signal``.
        self.signal = Signal()
        self._client = client
        self._calls = BlockingCalls(max_threads)
        options = dict(delivery_options)
        self._forwarded_signal: Signal | None = options.pop("signal", None)
        self._execute_delivery = execute_delivery
        self._delivery = WakeupDelivery(
            self._execute, {**options, "signal": self.signal}, on_delivery_failure
        )
        #: A delivery of the current batch found storage unavailable (a database
        #: restart or outage): the next receive waits for ``_storage_backoff``.
        self._storage_unavailable = False
        self._storage_backoff = ErrorBackoff()
        self._receive_params = dict(receive_params)
        self._state = _State.NEW
        self._task: asyncio.Task[None] | None = None
        self._stop_requested: asyncio.Event | None = None

    def __repr__(self) -> str:
        return f"SqsDeliveryConsumer(queue_url={self.queue_url!r}, state={self._state.value})"

    @property
    def running(self) -> bool:
        """Whether the receive loop is running."""
        return self._state is _State.RUNNING

    @property
    def closed(self) -> Awaitable[None]:
        """Completes when the loop has exited; raises if a receive or delete call failed.

        >>> await consumer.start()
        >>> await consumer.closed          # until stop(), or the error that ended the loop
        """
        if self._task is None:
            raise RunlaneError(
                ErrorCode.INVALID_STATE, "the consumer was never started; await start() first."
            )
        return asyncio.shield(self._task)

    async def start(self) -> None:
        """Start the receive loop in the background (no-op while it already runs)."""
        if self._state is _State.RUNNING:
            return
        if self._state is _State.CLOSED:
            raise RunlaneError(
                ErrorCode.INVALID_STATE,
                "this SQS consumer has stopped; create a new consumer to receive again.",
                meta={"queue_url": self.queue_url},
            )
        loop = asyncio.get_running_loop()
        self._stop_requested = asyncio.Event()
        self._state = _State.RUNNING
        self._task = loop.create_task(self._receive_loop(), name=f"runlane-sqs:{self.queue_url}")
        if self._forwarded_signal is not None:
            self._forwarded_signal.add_callback(
                lambda reason: _call_soon_threadsafe(loop, self._request_stop, reason)
            )

    async def stop(self) -> None:
        """Stop receiving, signal running deliveries, and wait for the loop to finish.

        Deliveries already started finish (cooperative tasks see ``ctx.signal``
        set with ``SignalReason.SHUTDOWN``) and are deleted when they resolve. A
        long poll in flight is abandoned; anything it receives reappears after
        the visibility timeout. Errors of the loop are raised by ``closed``, not here.
        """
        if self._task is None:
            self._state = _State.CLOSED
            self.signal.set(SignalReason.SHUTDOWN)
            return
        self._request_stop(SignalReason.SHUTDOWN)
        await asyncio.wait({self._task})

    def _request_stop(self, reason: SignalReason) -> None:
        self.signal.set(reason)
        if self._stop_requested is not None:
            self._stop_requested.set()

    async def _receive_loop(self) -> None:
        # Deletes of one batch overlap the receive of the next (standard queues only:
        # a FIFO group stays blocked until its messages are deleted).
        deleting: asyncio.Task[None] | None = None
        try:
            while True:
                messages = await self._receive()
                if deleting is not None:
                    await deleting
                    deleting = None
                if messages is None:
                    return
                resolved, observer_error = await self._deliver_batch(messages)
                deleting = asyncio.ensure_future(self._delete(resolved))
                if self.fifo or observer_error is not None:
                    await deleting
                    deleting = None
                if observer_error is not None:
                    raise observer_error
                await self._back_off_while_storage_is_unavailable()
        finally:
            if deleting is not None:
                await _settle_quietly(deleting, "deleting resolved wakeups")
            self._state = _State.CLOSED

    async def _execute(self, message: DeliveryMessage, **options: Any) -> Any:
        try:
            return await self._execute_delivery(message, **options)
        except RunlaneError as error:
            if error.code is ErrorCode.STORAGE_UNAVAILABLE:
                self._storage_unavailable = True
            raise

    async def _back_off_while_storage_is_unavailable(self) -> None:
        """After a batch that found storage unavailable, receive again only after a
        jittered pause that grows while it lasts: the consumer keeps running through a
        database restart or outage, without pulling wakeups it cannot execute (each
        pull counts toward the queue's redrive limit). Those it could not execute
        stay in the queue and come back after their visibility timeout."""
        assert self._stop_requested is not None
        if not self._storage_unavailable:
            self._storage_backoff.reset()
            return
        self._storage_unavailable = False
        delay = self._storage_backoff.next_delay()
        logger.warning(
            "SQS consumer of %s: storage unavailable; receiving again in %.1fs",
            self.queue_url,
            delay,
        )
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop_requested.wait(), delay)

    async def _receive(self) -> Sequence[Mapping[str, Any]] | None:
        assert self._stop_requested is not None
        if self._stop_requested.is_set():
            return None
        receive = asyncio.ensure_future(
            self._calls.call_sqs(self._client, "receive_message", **self._receive_params)
        )
        stopped = asyncio.ensure_future(self._stop_requested.wait())
        await asyncio.wait({receive, stopped}, return_when=asyncio.FIRST_COMPLETED)
        stopped.cancel()
        if self._stop_requested.is_set():
            if receive.done() and not receive.cancelled():
                receive.exception()  # abandoned either way; do not log it as unretrieved
            receive.cancel()
            return None
        try:
            response = receive.result()
        except Exception as error:
            raise self._call_error(error, "ReceiveMessage", "receiving wakeups") from None
        messages = response.get("Messages") or []
        if not isinstance(messages, list):
            raise RunlaneError(
                ErrorCode.ADAPTER_CONTRACT_VIOLATION,
                "SQS ReceiveMessage answered with a malformed Messages list.",
                meta={"queue_url": self.queue_url},
            )
        return messages

    async def _deliver_batch(
        self, messages: Sequence[Mapping[str, Any]]
    ) -> tuple[list[_ReceivedWakeup], BaseException | None]:
        """Deliver a received batch; return what resolved, and an observer error if any."""
        resolved: list[_ReceivedWakeup] = []
        if self.fifo:
            # In order; the first failure leaves it and every later message undeleted,
            # and so does a stop (the rest come back, still in order, after the timeout).
            for message in messages:
                if self.signal.is_set():
                    break
                try:
                    delivered = await self._deliver(message)
                except Exception as error:
                    return resolved, error
                if delivered is None:
                    break
                resolved.append((message, delivered))
            return resolved, None
        outcomes = await asyncio.gather(
            *(self._deliver(message) for message in messages), return_exceptions=True
        )
        observer_error: BaseException | None = None
        for message, outcome in zip(messages, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                observer_error = observer_error or outcome
            elif outcome is not None:
                resolved.append((message, outcome))
        return resolved, observer_error

    async def _deliver(self, message: Mapping[str, Any]) -> DeliveryMessage | None:
        provider_message_id = message.get("MessageId")
        provider_message_id = provider_message_id if isinstance(provider_message_id, str) else None
        if not isinstance(message.get("ReceiptHandle"), str):
            await self._delivery.report(
                SqsDeliveryFailure(
                    SqsDeliveryFailurePhase.MESSAGE,
                    RunlaneError(
                        ErrorCode.ADAPTER_CONTRACT_VIOLATION,
                        "an SQS message arrived without a receipt handle; it cannot be deleted.",
                    ),
                    provider_message_id=provider_message_id,
                    queue_url=self.queue_url,
                )
            )
            return None
        return await self._delivery.deliver(
            message.get("Body"), provider_message_id=provider_message_id, queue_url=self.queue_url
        )

    async def _delete(self, resolved: Sequence[_ReceivedWakeup]) -> None:
        if not resolved:
            return
        entries = [
            {"Id": str(index), "ReceiptHandle": message["ReceiptHandle"]}
            for index, (message, _) in enumerate(resolved)
        ]
        try:
            response = await self._calls.call_sqs(
                self._client, "delete_message_batch", QueueUrl=self.queue_url, Entries=entries
            )
        except Exception as error:
            raise self._call_error(
                error, "DeleteMessageBatch", "deleting resolved wakeups"
            ) from None
        results = match_batch_entries(
            [entry["Id"] for entry in entries],
            response,
            operation="DeleteMessageBatch",
            queue_url=self.queue_url,
        )
        for index, (message, delivered) in enumerate(resolved):
            result = results[str(index)]
            if result.succeeded:
                continue
            cause = RunlaneError(
                ErrorCode.TRANSPORT_UNAVAILABLE,
                f"SQS did not delete the resolved wakeup for run {delivered.run_id}; it will "
                "be delivered again and ignored (provider code in meta).",
                meta={
                    "operation": "DeleteMessageBatch",
                    "queue_url": self.queue_url,
                    "provider_code": result.provider_code,
                    "provider_message": result.entry.get("Message"),
                    "sender_fault": result.sender_fault,
                    "request_id": response_request_id(response),
                },
                retryable=entry_retryable(result.provider_code, result.sender_fault),
            )
            await self._delivery.report(
                SqsDeliveryFailure(
                    SqsDeliveryFailurePhase.DELETE,
                    cause,
                    provider_message_id=message.get("MessageId"),
                    delivery_message=delivered,
                    queue_url=self.queue_url,
                )
            )

    def _call_error(self, error: Exception, operation: str, what: str) -> Exception:
        if not is_provider_error(error):
            return error
        return provider_call_error(
            error,
            operation=operation,
            permanent_code=ErrorCode.TRANSPORT_UNAVAILABLE,
            what=f"{what} from {self.queue_url}",
            queue_url=self.queue_url,
        )


def create_sqs_delivery_consumer(
    *,
    client: Any,
    queue_url: str,
    execute_delivery: ExecuteDelivery,
    delivery_options: Mapping[str, Any] | None = None,
    fifo: bool = False,
    max_number_of_messages: int = DEFAULT_MAX_NUMBER_OF_MESSAGES,
    wait_time_seconds: int = DEFAULT_WAIT_TIME_SECONDS,
    visibility_timeout_seconds: int | None = None,
    on_delivery_failure: OnDeliveryFailure | None = None,
    max_threads: int = DEFAULT_MAX_THREADS,
) -> SqsDeliveryConsumer:
    """A long-running consumer of one SQS queue that executes each wakeup it receives.

    Each body is passed to ``await execute_delivery(message, **delivery_options)``
    with ``signal`` set to the consumer's own :class:`Signal` (a ``signal`` given
    in ``delivery_options`` is forwarded to it and stops the consumer too). Only
    messages whose delivery resolved are deleted. With ``fifo=True`` (the URL
    must end in ``.fifo``) a batch is handled in order and stops at its first
    failure. ``visibility_timeout_seconds`` should exceed the longest delivery.
    boto3 calls (the long poll, deletes) run on at most ``max_threads`` threads.
    While deliveries find storage unavailable (a database restart or outage) the
    consumer keeps running: it logs and waits before receiving again (0.5 s doubling
    to 5 s, jittered), and what it could not execute comes back after the visibility
    timeout.

    >>> consumer = create_sqs_delivery_consumer(
    ...     client=boto3.client("sqs"), queue_url=url, execute_delivery=rl.execute_delivery,
    ...     delivery_options={"lease_duration": "2m"}, visibility_timeout_seconds=120)
    >>> await consumer.start()
    >>> ...
    >>> await consumer.stop()
    """
    owner = "create_sqs_delivery_consumer"
    for operation in ("receive_message", "delete_message_batch"):
        if not callable(getattr(client, operation, None)):
            raise configuration_error(
                f"{owner} needs a boto3 SQS client, for example boto3.client('sqs')."
            )
    queue_name = validate_queue_url(queue_url, owner)
    if not isinstance(fifo, bool):
        raise configuration_error(f"{owner}: fifo must be True or False.")
    if fifo != queue_name.endswith(FIFO_SUFFIX):
        raise configuration_error(
            f"{owner}: fifo={fifo} does not match queue {queue_name!r}; FIFO queues end in "
            "'.fifo' and are consumed with fifo=True (in order, stopping at a failure)."
        )
    validate_callbacks(execute_delivery, on_delivery_failure, owner=owner)
    _check_whole_number(
        max_number_of_messages, "max_number_of_messages", 1, SQS_MAX_BATCH_ENTRIES, owner
    )
    _check_whole_number(wait_time_seconds, "wait_time_seconds", 0, MAX_WAIT_TIME_SECONDS, owner)
    receive_params: dict[str, Any] = {
        "QueueUrl": queue_url,
        "MaxNumberOfMessages": max_number_of_messages,
        "WaitTimeSeconds": wait_time_seconds,
    }
    if visibility_timeout_seconds is not None:
        _check_whole_number(
            visibility_timeout_seconds,
            "visibility_timeout_seconds",
            0,
            MAX_VISIBILITY_TIMEOUT_SECONDS,
            owner,
        )
        receive_params["VisibilityTimeout"] = visibility_timeout_seconds
    return SqsDeliveryConsumer(
        client=client,
        queue_url=queue_url,
        execute_delivery=execute_delivery,
        delivery_options=validate_delivery_options(delivery_options, owner=owner),
        on_delivery_failure=on_delivery_failure,
        fifo=fifo,
        receive_params=receive_params,
        max_threads=check_max_threads(max_threads, owner),
    )


async def _settle_quietly(task: asyncio.Task[None], what: str) -> None:
    # The loop is already failing; a second failure is logged, not raised over the first.
    await asyncio.wait({task})
    if not task.cancelled() and task.exception() is not None:
        logger.warning("SQS consumer also failed while %s: %r", what, task.exception())


def _call_soon_threadsafe(loop: asyncio.AbstractEventLoop, callback: Any, *args: Any) -> None:
    # A forwarded signal may fire long after this consumer's loop has closed.
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(callback, *args)


def _check_whole_number(value: object, name: str, low: int, high: int, owner: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise configuration_error(
            f"{owner}: {name} must be a whole number from {low} to {high}, got {value!r}."
        )
