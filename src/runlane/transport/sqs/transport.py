"""The SQS transport: one wakeup per SQS message, sent with ``SendMessageBatch``."""

from __future__ import annotations

import asyncio
import hashlib
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from runlane.model.queue_defs import QueueDef
from runlane.ports.transport import (
    PublishFailure,
    PublishOutcome,
    TransportCapabilities,
    WakeupAttempt,
    WakeupFailed,
    WakeupPublished,
)
from runlane.ports.wakeup_envelope import create_wakeup_body
from runlane.transport.sqs.batch_entries import (
    SQS_MAX_BATCH_ENTRIES,
    BatchEntryResult,
    chunked,
    match_batch_entries,
)
from runlane.transport.sqs.bindings import (
    SqsFifo,
    SqsFifoDeduplication,
    SqsFifoMessageGroup,
    SqsQueueBinding,
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
from runlane.types.errors import ErrorCode, RunlaneError, configuration_error

#: Default number of wakeups per ``SendMessageBatch`` request (the SQS maximum).
DEFAULT_BATCH_SIZE = SQS_MAX_BATCH_ENTRIES
#: ``SendMessageBatch`` requests one publish call keeps in flight at once (within
#: botocore's default pool of 10 connections per client).
CONCURRENT_BATCH_REQUESTS = 8
#: What SQS accepts as a ``MessageGroupId`` / ``MessageDeduplicationId``: 1-128 printable
#: ASCII characters without spaces (letters, digits and punctuation).
_PROVIDER_SAFE_ID = re.compile(r"^[!-~]{1,128}$")


def provider_safe_id(value: str) -> str:
    """``value`` itself when SQS accepts it as a group/deduplication id, else its SHA-256.

    >>> provider_safe_id("0190f3c2-7a1b-7c3d-8e4f-5a6b7c8d9e0f")
    '0190f3c2-7a1b-7c3d-8e4f-5a6b7c8d9e0f'
    """
    if _PROVIDER_SAFE_ID.match(value):
        return value
    return hashlib.sha256(value.encode("utf-8")).hexdigest()


def send_entry(entry_id: str, attempt: WakeupAttempt, fifo: SqsFifo | None) -> dict[str, str]:
    """The ``SendMessageBatch`` entry of one wakeup: its v1 envelope, plus FIFO ids."""
    entry = {"Id": entry_id, "MessageBody": create_wakeup_body(attempt.message)}
    if fifo is not None:
        group = (
            attempt.message.run_id
            if fifo.message_group is SqsFifoMessageGroup.RUN
            else attempt.message.queue
        )
        entry["MessageGroupId"] = provider_safe_id(group)
        if fifo.deduplication is SqsFifoDeduplication.OUTBOX:
            entry["MessageDeduplicationId"] = provider_safe_id(attempt.outbox_id)
    return entry


class SqsTransport:
    """Publishes wakeups to the SQS queues bound to runlane queues; see :func:`sqs_transport`."""

    def __init__(
        self,
        *,
        client: Any,
        bindings: Sequence[SqsQueueBinding],
        batch_size: int,
        name: str,
        max_threads: int = DEFAULT_MAX_THREADS,
    ) -> None:
        self.name = name
        self._client = client
        self._calls = BlockingCalls(max_threads)
        self._bindings = {binding.queue.name: binding for binding in bindings}
        self._batch_size = min(batch_size, SQS_MAX_BATCH_ENTRIES)
        self._resolved_urls: dict[str, str] = {
            binding.queue.name: binding.queue_url
            for binding in bindings
            if binding.queue_url is not None
        }
        self._resolve_locks = {queue_name: threading.Lock() for queue_name in self._bindings}
        all_fifo = all(binding.fifo is not None for binding in bindings)
        self.capabilities = TransportCapabilities(
            durable_delivery=True,
            native_delay=False,
            message_grouping=all_fifo,
            ordered_delivery=all_fifo,
        )

    def __repr__(self) -> str:
        return f"SqsTransport(name={self.name!r}, queues={sorted(self._bindings)})"

    @property
    def queues(self) -> Sequence[QueueDef]:
        """The queue definitions this transport has bindings for."""
        return [binding.queue for binding in self._bindings.values()]

    @property
    def bindings(self) -> Sequence[SqsQueueBinding]:
        """The SQS bindings, one per queue."""
        return list(self._bindings.values())

    async def open(self) -> None:
        """Nothing to open: the boto3 client belongs to the caller."""

    async def close(self) -> None:
        """Nothing to close: the boto3 client belongs to the caller."""

    async def queue_url(self, queue: QueueDef | str) -> str:
        """The SQS queue URL bound to ``queue`` (resolving a queue name once).

        >>> consumer = create_sqs_delivery_consumer(
        ...     client=client, queue_url=await transport.queue_url(emails), execute_delivery=...)
        """
        queue_name = queue.name if isinstance(queue, QueueDef) else queue
        return await self._resolve(self._binding_for(queue_name))

    async def publish_wakeups(self, attempts: Sequence[WakeupAttempt]) -> list[PublishOutcome]:
        """Send one SQS message per attempt; ``outcomes[i]`` describes ``attempts[i]``.

        Attempts are grouped by SQS queue URL and sent in chunks of at most
        ``batch_size`` (never more than 10); a FIFO queue's chunks go out in
        order, other chunks in parallel. Refused entries come back as
        :class:`WakeupFailed`. A chunk refused as a whole for good (one entry
        too large, say) is split until each bad entry fails alone; a chunk that
        fails as a whole otherwise fails its own entries only, and the chunks
        sent before or beside it keep their outcomes. Only when every chunk
        failed as a whole does the call raise ``TRANSPORT_UNAVAILABLE``
        (retryable) or ``TRANSPORT_PUBLISH_FAILED``.
        """
        bindings = [self._binding_for_attempt(attempt) for attempt in attempts]
        indices_by_url: dict[str, list[int]] = {}
        for index, binding in enumerate(bindings):
            url = await self._resolve(binding)
            indices_by_url.setdefault(url, []).append(index)
        # A sequence of batches that must go out one after another: a FIFO queue's
        # batches keep their message groups in order; standard batches go out in parallel.
        sequences: list[tuple[str, list[Sequence[int]]]] = []
        for url, indices in indices_by_url.items():
            batches = list(chunked(indices, self._batch_size))
            if any(bindings[i].fifo is not None for i in indices):
                sequences.append((url, batches))
            else:
                sequences.extend((url, [batch]) for batch in batches)
        outcomes = _Outcomes([None] * len(attempts))
        in_flight = asyncio.Semaphore(CONCURRENT_BATCH_REQUESTS)

        async def send_in_order(url: str, batches: list[Sequence[int]]) -> None:
            for position, batch in enumerate(batches):
                async with in_flight:
                    error = await self._send_batch(url, batch, attempts, bindings, outcomes)
                if error is not None and error.retryable and position + 1 < len(batches):
                    # Later batches of a FIFO queue wait, so their groups stay in order.
                    held = [i for later in batches[position + 1 :] for i in later]
                    outcomes.fail(held, _held_back(error))
                    return

        # Send everything, then report: no batch is left half-awaited.
        results = await asyncio.gather(
            *(send_in_order(url, batches) for url, batches in sequences), return_exceptions=True
        )
        for result in results:
            if isinstance(result, BaseException):
                raise result
        if outcomes.errors and len(outcomes.failed_whole) == len(attempts):
            raise outcomes.errors[0]
        assert all(outcome is not None for outcome in outcomes.items)
        return [outcome for outcome in outcomes.items if outcome is not None]

    async def _send_batch(
        self,
        url: str,
        batch: Sequence[int],
        attempts: Sequence[WakeupAttempt],
        bindings: Sequence[SqsQueueBinding],
        outcomes: _Outcomes,
    ) -> RunlaneError | None:
        """Send one chunk and write its entries' outcomes; the last error of a request
        that failed as a whole (its entries' outcomes say so too), if any."""
        entries = [send_entry(str(i), attempts[i], bindings[i].fifo) for i in batch]
        queue_names = sorted({bindings[i].queue.name for i in batch})
        try:
            response = await self._calls.call_sqs(
                self._client, "send_message_batch", QueueUrl=url, Entries=entries
            )
        except Exception as error:
            if not is_provider_error(error):
                raise
            failure = provider_call_error(
                error,
                operation="SendMessageBatch",
                permanent_code=ErrorCode.TRANSPORT_PUBLISH_FAILED,
                what=f"publishing {len(batch)} wakeup(s) for queue(s) {queue_names}",
                queues=queue_names,
                queue_url=url,
            )
            if failure.retryable or len(batch) == 1 or not _entry_may_be_the_cause(failure):
                outcomes.fail(batch, failure)
                return failure
            # Refused for good as a whole: one entry (too large, say) may be the cause.
            # Halve the chunk until every bad entry fails alone and the rest go out.
            middle = len(batch) // 2
            first = await self._send_batch(url, batch[:middle], attempts, bindings, outcomes)
            second = await self._send_batch(url, batch[middle:], attempts, bindings, outcomes)
            return second or first
        try:
            results = match_batch_entries(
                [entry["Id"] for entry in entries],
                response,
                operation="SendMessageBatch",
                queue_url=url,
            )
        except RunlaneError as failure:
            outcomes.fail(batch, failure)
            return failure
        published_at = datetime.now(UTC)
        request_id = response_request_id(response)
        for i in batch:
            outcomes.items[i] = _outcome(
                results[str(i)], attempts[i], url, request_id, published_at
            )
        return None

    def _binding_for_attempt(self, attempt: WakeupAttempt) -> SqsQueueBinding:
        if not isinstance(attempt, WakeupAttempt) or not attempt.outbox_id:
            raise RunlaneError(
                ErrorCode.ADAPTER_CONTRACT_VIOLATION,
                "publish_wakeups needs WakeupAttempt values with an outbox id.",
                meta={"got": type(attempt).__name__},
            )
        return self._binding_for(attempt.message.queue)

    def _binding_for(self, queue_name: str) -> SqsQueueBinding:
        binding = self._bindings.get(queue_name)
        if binding is None:
            raise configuration_error(
                f"transport {self.name!r} has no SQS binding for queue {queue_name!r}; "
                f"add sqs_queue(...) for it (bound: {sorted(self._bindings)}).",
                queue=queue_name,
            )
        return binding

    async def _resolve(self, binding: SqsQueueBinding) -> str:
        cached = self._resolved_urls.get(binding.queue.name)
        if cached is not None:
            return cached
        try:
            return await self._calls.run(self._resolve_blocking, binding)
        except Exception as error:
            if not is_provider_error(error):
                raise
            raise provider_call_error(
                error,
                operation="GetQueueUrl",
                permanent_code=ErrorCode.CONFIGURATION_INVALID,
                what=(
                    f"resolving SQS queue name {binding.queue_name!r} of queue "
                    f"{binding.queue.name!r}; check the name, account and region"
                ),
                queue=binding.queue.name,
                queue_name=binding.queue_name,
            ) from None

    def _resolve_blocking(self, binding: SqsQueueBinding) -> str:
        # One lookup per binding even when several publishes race for it.
        with self._resolve_locks[binding.queue.name]:
            cached = self._resolved_urls.get(binding.queue.name)
            if cached is not None:
                return cached
            params = {"QueueName": binding.queue_name}
            if binding.queue_owner_aws_account_id is not None:
                params["QueueOwnerAWSAccountId"] = binding.queue_owner_aws_account_id
            url = self._client.get_queue_url(**params).get("QueueUrl")
            if not isinstance(url, str) or not url:
                raise RunlaneError(
                    ErrorCode.ADAPTER_CONTRACT_VIOLATION,
                    f"SQS GetQueueUrl answered without a QueueUrl for {binding.queue_name!r}.",
                    meta={"queue": binding.queue.name, "queue_name": binding.queue_name},
                )
            self._resolved_urls[binding.queue.name] = url
            return url


#: Provider codes of whole-request refusals no entry can cause (the queue, the
#: credentials or the key): splitting the request would only repeat them.
_QUEUE_LEVEL_CODE_MARKERS = (
    "NonExistentQueue",
    "QueueDoesNotExist",
    "AccessDenied",
    "InvalidClientTokenId",
    "UnrecognizedClient",
    "SignatureDoesNotMatch",
    "InvalidSecurity",
    "KMS",
)


def _entry_may_be_the_cause(failure: RunlaneError) -> bool:
    code = str(failure.meta.get("provider_code") or "")
    return not any(marker in code for marker in _QUEUE_LEVEL_CODE_MARKERS)


@dataclass(slots=True)
class _Outcomes:
    """The outcomes of one publish call as its chunks answer."""

    items: list[PublishOutcome | None]
    #: Entries whose request failed as a whole, and those requests' errors.
    failed_whole: set[int] = field(default_factory=set)
    errors: list[RunlaneError] = field(default_factory=list)

    def fail(self, indices: Sequence[int], error: RunlaneError) -> None:
        """Every entry in ``indices`` failed with ``error``, a whole-request failure."""
        failure = PublishFailure(error.code.value, error.message, error.retryable, dict(error.meta))
        for i in indices:
            self.items[i] = WakeupFailed(failure)
        self.failed_whole.update(indices)
        self.errors.append(error)


def _held_back(error: RunlaneError) -> RunlaneError:
    return RunlaneError(
        error.code,
        "not sent: an earlier batch for this FIFO queue failed, and message groups keep "
        "their order.",
        meta=error.meta,
        retryable=True,
    )


def _outcome(
    result: BatchEntryResult,
    attempt: WakeupAttempt,
    queue_url: str,
    request_id: str | None,
    published_at: datetime,
) -> PublishOutcome:
    if result.succeeded:
        message_id = result.entry.get("MessageId")
        return WakeupPublished(published_at, str(message_id) if message_id else None)
    meta = {
        "operation": "SendMessageBatch",
        "queue": attempt.message.queue,
        "queue_url": queue_url,
        "provider_code": result.provider_code,
        "provider_message": result.entry.get("Message"),
        "sender_fault": result.sender_fault,
        "request_id": request_id,
    }
    return WakeupFailed(
        PublishFailure(
            code=ErrorCode.TRANSPORT_PUBLISH_FAILED.value,
            message=(
                f"SQS refused the wakeup for run {attempt.message.run_id} (provider code in meta)."
            ),
            retryable=entry_retryable(result.provider_code, result.sender_fault),
            meta={key: value for key, value in meta.items() if value is not None},
        )
    )


def sqs_transport(
    *,
    client: Any,
    queues: Sequence[SqsQueueBinding],
    batch_size: int = DEFAULT_BATCH_SIZE,
    name: str = "sqs",
    max_threads: int = DEFAULT_MAX_THREADS,
) -> SqsTransport:
    """An SQS transport for a lane: one binding per runlane queue it carries.

    ``client`` is a boto3 SQS client (``boto3.client("sqs")``); ``batch_size``
    caps wakeups per ``SendMessageBatch`` request (SQS allows at most 10).
    boto3 blocks, so its calls run on at most ``max_threads`` threads (default
    :data:`~runlane.transport.sqs.provider.DEFAULT_MAX_THREADS`, botocore's
    connection pool size); raise both together for very high publish rates.

    >>> transport = sqs_transport(
    ...     client=boto3.client("sqs"),
    ...     queues=[sqs_queue(main, queue_url=url), sqs_queue(emails, queue_name="emails")],
    ... )
    >>> lane = postgres_lane(dsn, transport=transport)
    """
    if not callable(getattr(client, "send_message_batch", None)) or not callable(
        getattr(client, "get_queue_url", None)
    ):
        raise configuration_error(
            "sqs_transport needs a boto3 SQS client, for example boto3.client('sqs')."
        )
    if isinstance(queues, SqsQueueBinding | str) or not isinstance(queues, Sequence):
        raise configuration_error("sqs_transport queues must be a list of sqs_queue(...) bindings.")
    if not queues:
        raise configuration_error("sqs_transport needs at least one sqs_queue(...) binding.")
    by_name: dict[str, SqsQueueBinding] = {}
    for binding in queues:
        if not isinstance(binding, SqsQueueBinding):
            raise configuration_error(
                "sqs_transport queues must hold sqs_queue(...) bindings, "
                f"got {type(binding).__name__}."
            )
        existing = by_name.get(binding.queue.name)
        if existing is not None and existing.queue != binding.queue:
            raise RunlaneError(
                ErrorCode.QUEUE_POLICY_DRIFT,
                f"sqs_transport binds queue {binding.queue.name!r} twice with different "
                "policies; bind one shared queue(...) definition once.",
                meta={"queue": binding.queue.name},
            )
        if existing is not None:
            raise configuration_error(
                f"sqs_transport binds queue {binding.queue.name!r} twice; one binding per queue.",
                queue=binding.queue.name,
            )
        by_name[binding.queue.name] = binding
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise configuration_error(
            f"sqs_transport batch_size must be a whole number of at least 1, got {batch_size!r} "
            f"(requests carry at most {SQS_MAX_BATCH_ENTRIES} entries)."
        )
    if not isinstance(name, str) or not name.strip():
        raise configuration_error("sqs_transport name must be a non-empty string.")
    return SqsTransport(
        client=client,
        bindings=list(queues),
        batch_size=batch_size,
        name=name,
        max_threads=check_max_threads(max_threads, "sqs_transport"),
    )
