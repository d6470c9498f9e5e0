"""Typed errors: every failure the runtime raises is a :class:`RunlaneError`."""

from __future__ import annotations

from enum import StrEnum
from typing import Any


class ErrorCode(StrEnum):
    """Stable, machine-readable error codes; branch on these, never on messages."""

    CONFIGURATION_INVALID = "configuration_invalid"
    PAYLOAD_INVALID = "payload_invalid"
    PAYLOAD_TOO_LARGE = "payload_too_large"
    TASK_NOT_FOUND = "task_not_found"
    QUEUE_NOT_FOUND = "queue_not_found"
    QUEUE_POLICY_DRIFT = "queue_policy_drift"
    RUN_NOT_FOUND = "run_not_found"
    SCHEDULE_NOT_FOUND = "schedule_not_found"
    TOPIC_NOT_FOUND = "topic_not_found"
    SUBSCRIPTION_NOT_FOUND = "subscription_not_found"
    DEAD_LETTER_NOT_FOUND = "dead_letter_not_found"
    MESSAGE_ID_CONFLICT = "message_id_conflict"
    STORAGE_CONFLICT = "storage_conflict"
    STORAGE_UNAVAILABLE = "storage_unavailable"
    CAPABILITY_UNSUPPORTED = "capability_unsupported"
    ADAPTER_CONTRACT_VIOLATION = "adapter_contract_violation"
    TASK_FAILED = "task_failed"
    TASK_TIMEOUT = "task_timeout"
    LEASE_EXPIRED = "lease_expired"
    OPERATION_CANCELLED = "operation_cancelled"
    INVALID_STATE = "invalid_state"
    TRANSPORT_PUBLISH_FAILED = "transport_publish_failed"
    TRANSPORT_UNAVAILABLE = "transport_unavailable"
    INTERNAL_ERROR = "internal_error"


class RunlaneError(Exception):
    """An error with a stable :class:`ErrorCode`.

    ``message`` is safe to show to a person: it never holds credentials or raw
    provider text. Provider and driver details go in ``meta``. ``retryable``
    says whether the same call may succeed later (a task raising a
    non-retryable error fails its run at once).

    >>> raise RunlaneError(ErrorCode.TASK_FAILED, "Upstream refused", retryable=False)
    """

    def __init__(
        self,
        code: ErrorCode,
        message: str,
        *,
        meta: dict[str, Any] | None = None,
        retryable: bool = False,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.meta: dict[str, Any] = dict(meta or {})
        self.retryable = retryable

    def __repr__(self) -> str:
        return f"RunlaneError(code={self.code.value!r}, message={self.message!r})"

    def __str__(self) -> str:
        return f"[{self.code.value}] {self.message}"


def configuration_error(message: str, **meta: Any) -> RunlaneError:
    """Shorthand for the most common error: bad configuration at a call site."""
    return RunlaneError(ErrorCode.CONFIGURATION_INVALID, message, meta=meta)
