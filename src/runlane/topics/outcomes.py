"""What a handler's attempt ends with, and where that takes the delivery (contract 5.5.1).

:func:`decide_delivery` maps the attempt's end (a return value or an exception)
and the retry budget to the delivery's next step. It is pure: the wiring turns
its answer into a storage transition (see :mod:`runlane.topics.states`).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from runlane.model.context import Release
from runlane.topics.constants import MAX_DEAD_LETTER_REASON
from runlane.types.durations import Duration, parse_optional_duration
from runlane.types.errors import ErrorCode, RunlaneError, configuration_error
from runlane.types.retry import RetryPolicy
from runlane.types.runs import RunFailure
from runlane.types.storable_text import storable, unstorable


class OutcomeKind(StrEnum):
    """The three things a handler may decide."""

    COMPLETE = "complete"
    RETRY = "retry"
    DEAD_LETTER = "dead_letter"


class DeadLetterReason(StrEnum):
    """The built-in reasons a delivery is dead-lettered with."""

    MAX_ATTEMPTS_EXCEEDED = "max_attempts_exceeded"
    LEASE_EXPIRED = "lease_expired"
    PAYLOAD_INVALID = "payload_invalid"
    FATAL_WORK_ERROR = "fatal_work_error"
    INVALID_ENVELOPE = "invalid_envelope"
    REDRIVE_POLICY = "redrive_policy"


@dataclass(frozen=True, slots=True)
class Outcome:
    """A handler's decision. Build it with :meth:`complete`, :meth:`retry` or :meth:`dead_letter`.

    >>> return Outcome.retry("upstream busy", delay="30s")
    """

    kind: OutcomeKind
    reason: str | None = None
    #: Seconds before the retry; ``None``: the subscription's backoff.
    delay: float | None = None

    @classmethod
    def complete(cls) -> Outcome:
        """The delivery is done (the same as returning ``None``)."""
        return _COMPLETE

    @classmethod
    def retry(cls, reason: str | None = None, delay: Duration | None = None) -> Outcome:
        """Try again after ``delay`` (or the backoff), while the retry budget lasts."""
        if reason is not None:
            _check_reason(reason, "Outcome.retry")
        seconds = parse_optional_duration(delay, name="Outcome.retry delay")
        return cls(OutcomeKind.RETRY, reason, seconds)

    @classmethod
    def dead_letter(cls, reason: str) -> Outcome:
        """Park the delivery for an operator, whatever budget is left."""
        _check_reason(reason, "Outcome.dead_letter")
        return cls(OutcomeKind.DEAD_LETTER, reason)


_COMPLETE = Outcome(OutcomeKind.COMPLETE)


def _check_reason(reason: object, where: str) -> None:
    if not isinstance(reason, str) or not reason.strip():
        raise configuration_error(f"{where} needs a non-empty reason string, got {reason!r}.")
    problem = unstorable(reason)
    if problem is not None:
        raise configuration_error(f"{where} reason must not contain {problem}.")


class TransientWorkError(Exception):
    """Raise it for a failure worth retrying, optionally after ``retry_after``."""

    def __init__(self, message: str = "", *, retry_after: Duration | None = None) -> None:
        super().__init__(message)
        self.retry_after = parse_optional_duration(retry_after, name="retry_after")


class FatalWorkError(Exception):
    """Raise it when retrying cannot help: the delivery is dead-lettered at once."""

    def __init__(self, message: str = "") -> None:
        super().__init__(message)


@dataclass(frozen=True, slots=True)
class Complete:
    """The delivery succeeds (``run.result`` stays ``None``)."""


@dataclass(frozen=True, slots=True)
class ReleaseFor:
    """The handler released the delivery: not a failure, no budget spent."""

    delay: float
    reason: str | None


@dataclass(frozen=True, slots=True)
class RetryAfter:
    """The delivery retries after ``delay`` seconds; ``failure`` is kept on the run."""

    delay: float
    failure: RunFailure


@dataclass(frozen=True, slots=True)
class DeadLetterWith:
    """The delivery is parked with ``reason`` ; no failure after ``Outcome.dead_letter``."""

    reason: str
    failure: RunFailure | None


DeliveryDecision = Complete | ReleaseFor | RetryAfter | DeadLetterWith


def decide_delivery(
    ended_with: object,
    *,
    raised: bool,
    failures_so_far: int,
    policy: RetryPolicy,
    describe: Callable[[BaseException], RunFailure] | None = None,
    rng: random.Random | None = None,
) -> DeliveryDecision:
    """Where an attempt that ended with ``ended_with`` takes the delivery (5.5.1).

    ``raised`` tells a returned value from a raised exception. ``failures_so_far``
    counts failures since publish or the last replay, before this attempt: the
    budget is left when this failure, counted, stays under ``policy.max_attempts``.
    ``describe`` turns an exception into a stored :class:`RunFailure` (the
    runtime's sanitiser); the default keeps the type name only.

    Cancellation, lease expiry and shutdown are decided before an outcome is
    looked at (see :mod:`runlane.topics.states`).
    """
    sanitize = describe or _describe
    if not raised:
        if ended_with is None:
            return Complete()
        if isinstance(ended_with, Release):
            return ReleaseFor(ended_with.delay, ended_with.reason)
        if isinstance(ended_with, Outcome):
            if ended_with.kind is OutcomeKind.COMPLETE:
                return Complete()
            if ended_with.kind is OutcomeKind.DEAD_LETTER:
                return DeadLetterWith(dead_letter_reason(ended_with.reason or ""), None)
            failure = RunFailure(
                code=ErrorCode.TASK_FAILED.value,
                message=storable(ended_with.reason or "The handler asked for a retry."),
                retryable=True,
                meta={"outcome": OutcomeKind.RETRY.value},
            )
            return _retry_or_dead_letter(failure, ended_with.delay, failures_so_far, policy, rng)
        failure = RunFailure(
            code=ErrorCode.TASK_FAILED.value,
            message=(
                f"The handler returned a {type(ended_with).__name__}; return None, an Outcome "
                "or ctx.release(...)."
            ),
            retryable=True,
            meta={"returned_type": type(ended_with).__qualname__},
        )
        return _retry_or_dead_letter(failure, None, failures_so_far, policy, rng)
    if not isinstance(ended_with, BaseException):
        raise TypeError("decide_delivery(raised=True) needs the exception the handler raised")
    if isinstance(ended_with, FatalWorkError):
        failure = RunFailure(
            code=ErrorCode.TASK_FAILED.value,
            message=storable(str(ended_with).strip() or "The handler raised FatalWorkError."),
            retryable=False,
            meta={"exception_type": "FatalWorkError"},
        )
        reason = str(ended_with).strip() or DeadLetterReason.FATAL_WORK_ERROR.value
        return DeadLetterWith(dead_letter_reason(reason), failure)
    failure = sanitize(ended_with)
    if isinstance(ended_with, RunlaneError) and not ended_with.retryable:
        return DeadLetterWith(ended_with.code.value, failure)
    delay = ended_with.retry_after if isinstance(ended_with, TransientWorkError) else None
    return _retry_or_dead_letter(failure, delay, failures_so_far, policy, rng)


def dead_letter_reason(reason: str) -> str:
    """``reason`` as stored: NUL replaced, cut to 500 characters ending in ``…``."""
    text = storable(reason)
    if len(text) > MAX_DEAD_LETTER_REASON:
        return text[: MAX_DEAD_LETTER_REASON - 1] + "…"
    return text


def _retry_or_dead_letter(
    failure: RunFailure,
    delay: float | None,
    failures_so_far: int,
    policy: RetryPolicy,
    rng: random.Random | None,
) -> RetryAfter | DeadLetterWith:
    failures = failures_so_far + 1
    if not policy.has_budget(failures):
        return DeadLetterWith(DeadLetterReason.MAX_ATTEMPTS_EXCEEDED.value, failure)
    return RetryAfter(policy.delay_after(failures, rng) if delay is None else delay, failure)


def _describe(error: BaseException) -> RunFailure:
    if isinstance(error, RunlaneError):
        return RunFailure(
            code=error.code.value,
            message=storable(error.message),
            retryable=error.retryable,
        )
    return RunFailure(
        code=ErrorCode.TASK_FAILED.value,
        message=f"Handler raised {type(error).__name__}.",
        retryable=True,
        meta={"exception_type": type(error).__qualname__},
    )
