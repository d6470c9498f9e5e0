"""The boundary to the SQS API: blocking boto3 calls off the event loop, failures classified.

boto3 is synchronous. Calls run on a bounded set of daemon worker threads (idle
ones are reused) and settle an asyncio future, so a 20-second long poll neither
blocks the event loop nor holds up interpreter or event-loop shutdown once its
caller stops waiting for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import queue
import threading
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from runlane.types.errors import ErrorCode, RunlaneError, configuration_error

try:
    from botocore.exceptions import BotoCoreError, ClientError, HTTPClientError
    from botocore.exceptions import ConnectionError as BotoConnectionError
except ImportError as error:  # pragma: no cover - depends on the install
    raise ImportError("runlane.sqs needs boto3; install runlane[sqs].") from error

#: Provider error codes that mean "try again later" (throttling and transient faults).
RETRYABLE_PROVIDER_CODES = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottled",
        "RequestThrottledException",
        "TooManyRequestsException",
        "RequestLimitExceeded",
        "SlowDown",
        "PriorRequestNotComplete",
        "RequestTimeout",
        "RequestTimeoutException",
        "ServiceUnavailable",
        "InternalError",
        "InternalFailure",
        "KmsThrottled",
        "KMS.ThrottlingException",
        # SNS spellings of throttling, KMS throttling and internal faults.
        "Throttled",
        "KMSThrottling",
        "KMSThrottlingException",
        "InternalErrorException",
    }
)
#: A worker thread with no call to run for this long exits.
IDLE_WORKER_TIMEOUT_S = 60.0
#: Threads one transport or consumer runs boto3 calls on at most: botocore keeps 10
#: connections per client by default, so more threads would only open and discard
#: extra connections. Calls beyond it wait for a thread.
DEFAULT_MAX_THREADS = 10
_SERVER_ERROR_STATUS = 500
T = TypeVar("T")
_THROTTLED_STATUS = 429


def check_max_threads(max_threads: object, owner: str) -> int:
    """``max_threads`` as a whole number of at least 1, or CONFIGURATION_INVALID."""
    if isinstance(max_threads, bool) or not isinstance(max_threads, int) or max_threads < 1:
        raise configuration_error(f"{owner}: max_threads must be a whole number of at least 1.")
    return max_threads


class BlockingCalls:
    """Runs blocking boto3 calls on at most ``max_threads`` daemon threads.

    An idle thread takes the next call; below the bound a new thread starts; at
    the bound the call waits for a thread to finish. Nothing joins the threads at
    exit, and an idle one retires after ``idle_timeout`` seconds.
    Invariant: ``_idle`` = threads waiting for a call - calls queued and not yet taken.
    """

    def __init__(
        self, max_threads: int = DEFAULT_MAX_THREADS, idle_timeout: float = IDLE_WORKER_TIMEOUT_S
    ) -> None:
        self.max_threads = max_threads
        self._jobs: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0
        self._threads = 0
        self._idle_timeout = idle_timeout

    @property
    def threads(self) -> int:
        """Threads alive now (busy or idle)."""
        with self._lock:
            return self._threads

    async def call_sqs(self, client: Any, operation: str, **params: Any) -> dict[str, Any]:
        """Call ``client.<operation>(**params)`` off the event loop and await its response."""
        response: dict[str, Any] = await self.run(getattr(client, operation), **params)
        return response

    async def run(self, function: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """Run a blocking call on a pool thread; cancelling the await abandons the call."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        context = contextvars.copy_context()

        def settle(setter: Callable[[Any], None], value: Any) -> None:
            if not future.done():
                setter(value)

        def job() -> None:
            outcome: tuple[Callable[[Any], None], Any]
            try:
                outcome = (future.set_result, context.run(function, *args, **kwargs))
            except BaseException as error:  # handed to the awaiting coroutine
                outcome = (future.set_exception, error)
            with contextlib.suppress(RuntimeError):  # the loop closed while we were away
                loop.call_soon_threadsafe(settle, *outcome)

        self._submit(job)
        return await future

    def _submit(self, job: Callable[[], None]) -> None:
        with self._lock:
            start = self._idle <= 0 and self._threads < self.max_threads
            if start:
                self._threads += 1
            else:  # an idle thread takes it, or the next one to finish does
                self._idle -= 1
        if start:
            threading.Thread(
                target=self._work, args=(job,), name="runlane-sqs", daemon=True
            ).start()
        else:
            self._jobs.put(job)

    def _work(self, job: Callable[[], None]) -> None:
        while True:
            job()
            with self._lock:
                self._idle += 1
            while True:
                try:
                    job = self._jobs.get(timeout=self._idle_timeout)
                    break
                except queue.Empty:
                    with self._lock:
                        if self._idle > 0:  # nobody is counting on this thread: retire
                            self._idle -= 1
                            self._threads -= 1
                            return


def is_provider_error(error: BaseException) -> bool:
    """Whether ``error`` came from botocore (as opposed to a bug in calling code)."""
    return isinstance(error, BotoCoreError | ClientError)


def is_retryable(error: BaseException) -> bool:
    """Throttling, 5xx answers and connection/endpoint trouble may succeed later."""
    if isinstance(error, ClientError):
        code = provider_code(error)
        status = _http_status(error)
        return (
            code in RETRYABLE_PROVIDER_CODES
            or status == _THROTTLED_STATUS
            or (status is not None and status >= _SERVER_ERROR_STATUS)
        )
    return isinstance(error, BotoConnectionError | HTTPClientError)


def provider_code(error: BaseException) -> str | None:
    """The provider's error code (``ClientError``) or ``None``."""
    if isinstance(error, ClientError):
        code = error.response.get("Error", {}).get("Code")
        return str(code) if code else None
    return None


def entry_retryable(provider_code: str | None, sender_fault: bool) -> bool:
    """Whether one refused batch entry may be accepted on a later attempt."""
    return not sender_fault or provider_code in RETRYABLE_PROVIDER_CODES


def provider_meta(error: BaseException, **extra: Any) -> dict[str, Any]:
    """Structured provider detail for ``RunlaneError.meta`` (never for the message)."""
    meta: dict[str, Any] = {"error_type": type(error).__name__}
    if isinstance(error, ClientError):
        details = error.response.get("Error", {})
        metadata = error.response.get("ResponseMetadata", {})
        meta["provider_code"] = details.get("Code")
        meta["provider_message"] = details.get("Message")
        meta["sender_fault"] = details.get("Type") == "Sender"
        meta["http_status"] = metadata.get("HTTPStatusCode")
        meta["request_id"] = metadata.get("RequestId")
    meta.update(extra)
    return {key: value for key, value in meta.items() if value is not None}


def provider_call_error(
    error: BaseException,
    *,
    operation: str,
    permanent_code: ErrorCode,
    what: str,
    service: str = "SQS",
    **meta: Any,
) -> RunlaneError:
    """A whole-call failure: ``TRANSPORT_UNAVAILABLE`` when retryable, else ``permanent_code``.

    ``what`` is a sentence fragment naming the attempted work; provider text
    never reaches the message. ``service`` names the AWS service in the message.
    """
    retryable = is_retryable(error)
    code = ErrorCode.TRANSPORT_UNAVAILABLE if retryable else permanent_code
    hint = "it may succeed later" if retryable else "retrying will not help until this is fixed"
    return RunlaneError(
        code,
        f"{service} {operation} failed while {what}; {hint} (provider details in meta).",
        meta=provider_meta(error, operation=operation, **meta),
        retryable=retryable,
    )


def response_request_id(response: Mapping[str, Any]) -> str | None:
    """The request id of a successful response, when the SDK reports it."""
    metadata = response.get("ResponseMetadata")
    return metadata.get("RequestId") if isinstance(metadata, Mapping) else None


def _http_status(error: ClientError) -> int | None:
    status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return status if isinstance(status, int) else None
