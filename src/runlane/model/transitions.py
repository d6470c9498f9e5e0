"""The pure state-transition rules: (run, what happened) → the write storage applies.

Nothing here does I/O. Storage applies the returned :class:`Transition` as a
compare-and-set, so a rule computed from a stale read never lands.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from runlane.types.errors import ErrorCode, RunlaneError
from runlane.types.records import NewEvent, ProgressWrite, RunChanges, Transition
from runlane.types.retry import RetryPolicy
from runlane.types.runs import CLAIMABLE_STATUSES, Run, RunEventType, RunFailure, RunStatus
from runlane.types.storable_text import storable, storable_json


@dataclass(frozen=True, slots=True)
class Succeeded:
    """The handler returned a value."""

    result: Any


@dataclass(frozen=True, slots=True)
class Failed:
    """The handler raised (or timed out); ``failure`` is already sanitised. ``error``
    is what it raised (for observers and log lines; never stored)."""

    failure: RunFailure
    error: BaseException | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Released:
    """The handler returned ``ctx.release(...)``."""

    delay: float
    reason: str | None


@dataclass(frozen=True, slots=True)
class LeaseExpired:
    """Maintenance found the lease expired: the owner is gone."""


AttemptOutcome = Succeeded | Failed | Released | LeaseExpired

LEASE_EXPIRED_FAILURE = RunFailure(
    code=ErrorCode.LEASE_EXPIRED.value,
    message="The worker's lease expired before the attempt finished.",
    retryable=True,
)


#: What a success without a result writes (shared: RunChanges is immutable).
_SUCCEEDED = RunChanges(status=RunStatus.SUCCEEDED)


def settle_attempt(
    run: Run,
    outcome: AttemptOutcome,
    policy: RetryPolicy,
    now: datetime,
    rng: random.Random | None = None,
    progress: ProgressWrite | None = None,
) -> Transition:
    """The transition that ends the attempt a leased ``run`` is in; it carries
    ``progress``, the attempt's last report not stored yet, to be stored with it."""
    if run.status not in (RunStatus.RUNNING, RunStatus.CANCELLATION_REQUESTED) or run.lease is None:
        raise RunlaneError(
            ErrorCode.INVALID_STATE,
            f"run {run.id} holds no lease (status {run.status.value}); no attempt to settle.",
        )
    if type(outcome) is Succeeded and run.status is RunStatus.RUNNING:
        # The common case, built directly: one event, and for a handler that returned
        # nothing the same (immutable) changes every time.
        result = outcome.result
        return Transition(
            run.id,
            run.event_sequence,
            _SUCCEEDED if result is None else RunChanges(RunStatus.SUCCEEDED, result=result),
            (NewEvent(RunEventType.SUCCEEDED, {"attempt": run.attempt}),),
            run.lease.token,
            None,
            progress,
        )
    events: list[NewEvent] = []
    expired = isinstance(outcome, LeaseExpired)
    if expired:
        events.append(
            NewEvent(
                RunEventType.LEASE_EXPIRED, {"attempt": run.attempt, "worker_id": run.lease.owner}
            )
        )
    if run.status is RunStatus.CANCELLATION_REQUESTED:
        # Once cancellation is requested, however the attempt ends, the run ends cancelled.
        changes = RunChanges(status=RunStatus.CANCELLED, cancel_reason=run.cancel_reason)
        events.append(
            NewEvent(RunEventType.CANCELLED, {"reason": run.cancel_reason, "attempt": run.attempt})
        )
    elif isinstance(outcome, Succeeded):
        changes = RunChanges(status=RunStatus.SUCCEEDED, result=outcome.result)
        events.append(NewEvent(RunEventType.SUCCEEDED, {"attempt": run.attempt}))
    elif isinstance(outcome, Released):
        run_at = now + timedelta(seconds=outcome.delay)
        changes = RunChanges(status=RunStatus.RELEASED, run_at=run_at, failure=run.failure)
        events.append(
            NewEvent(
                RunEventType.RELEASED,
                {"attempt": run.attempt, "reason": outcome.reason, "run_at": run_at.isoformat()},
            )
        )
    else:
        failure = LEASE_EXPIRED_FAILURE if isinstance(outcome, LeaseExpired) else outcome.failure
        changes, event = _failure_changes(run, failure, policy, now, rng)
        events.append(event)
    return Transition(
        run_id=run.id,
        expected_sequence=run.event_sequence,
        changes=changes,
        events=tuple(events),
        lease_token=run.lease.token,
        lease_expired_by=now if expired else None,
        progress=progress,
    )


def _failure_changes(
    run: Run, failure: RunFailure, policy: RetryPolicy, now: datetime, rng: random.Random | None
) -> tuple[RunChanges, NewEvent]:
    failures = run.failure_count + 1
    data: dict[str, Any] = {"attempt": run.attempt, "failure": failure.to_json()}
    if failure.retryable and policy.has_budget(failures):
        run_at = now + timedelta(seconds=policy.delay_after(failures, rng))
        data["retry_at"] = run_at.isoformat()
        changes = RunChanges(
            status=RunStatus.RETRYING, run_at=run_at, failure=failure, add_failure=True
        )
        return changes, NewEvent(RunEventType.RETRY_SCHEDULED, data)
    changes = RunChanges(status=RunStatus.FAILED, failure=failure, add_failure=True)
    return changes, NewEvent(RunEventType.FAILED, data)


def project(run: Run, transition: Transition, now: datetime) -> Run:
    """The run as storage holds it after ``transition`` was applied to ``run`` at ``now``."""
    changes = transition.changes
    # Built field by field rather than with dataclasses.replace: this runs once per
    # settled attempt, and replace() inspects the dataclass's fields on every call.
    # Positional, in Run's field order: a call with more than 15 keyword arguments
    # compiles to one that builds a dict of them first, at several times the cost.
    return Run(
        run.id,
        run.environment,
        run.task_id,
        run.queue,
        changes.status,
        run.payload,
        run.attempt,
        (0 if changes.reset_failures else run.failure_count) + int(changes.add_failure),
        changes.run_at or run.run_at,
        run.created_at,
        now,
        run.event_sequence + len(transition.events),
        run.source,
        changes.result,
        changes.failure,
        run.idempotency_key,
        run.singleton_key,
        run.concurrency_key,
        run.trace_carrier,
        run.lease if changes.keep_lease else None,
        changes.cancel_reason,
        run.partition_key,
        run.replays if changes.replays is None else changes.replays,
        run.mode,
        run.message_sequence,
        changes.dead_letter_reason or run.dead_letter_reason,
        changes.dead_lettered_at or run.dead_lettered_at,
        run.rate_key,
        None,
        run.priority,
    )


def request_cancellation(run: Run, reason: str | None) -> Transition | None:
    """Cancel a waiting run at once, or ask a running one to stop; ``None`` if already asked."""
    if run.status.is_terminal:
        raise RunlaneError(
            ErrorCode.INVALID_STATE,
            f"run {run.id} is already {run.status.value}; a finished run cannot be cancelled.",
            meta={"run_id": run.id, "status": run.status.value},
        )
    if run.status is RunStatus.DEAD_LETTERED:
        # Parked for an operator, who replays or discards it (contract 5.6).
        raise RunlaneError(
            ErrorCode.INVALID_STATE,
            f"run {run.id} is a dead-lettered delivery of subscription {run.task_id!r}; "
            "it cannot be cancelled: use rl.dead_letters to replay or discard it.",
            meta={"run_id": run.id, "status": run.status.value},
        )
    if run.status is RunStatus.CANCELLATION_REQUESTED:
        return None
    data = {"reason": reason}
    if run.status in CLAIMABLE_STATUSES or run.status is RunStatus.WAITING:
        changes = RunChanges(status=RunStatus.CANCELLED, cancel_reason=reason, failure=run.failure)
        event = NewEvent(RunEventType.CANCELLED, data)
    else:
        changes = RunChanges(
            status=RunStatus.CANCELLATION_REQUESTED, cancel_reason=reason, keep_lease=True
        )
        event = NewEvent(RunEventType.CANCELLATION_REQUESTED, data)
    return Transition(
        run_id=run.id, expected_sequence=run.event_sequence, changes=changes, events=(event,)
    )


def sanitize_exception(error: BaseException) -> RunFailure:
    """Turn whatever a handler raised into a failure safe to store and show.

    A :class:`RunlaneError` keeps its code, message and retryable flag. Anything
    else becomes ``task_failed`` (retryable) with the exception type in ``meta``;
    its text is kept in ``meta`` too, since task code owns it, but is cut short.
    What storage cannot keep (NUL characters, lone surrogates, non-JSON values in
    ``meta``) is replaced, so one bad failure never fails a batch of settles.
    """
    try:
        if isinstance(error, RunlaneError):
            return RunFailure(
                code=error.code.value,
                message=storable(str(error.message)),
                retryable=bool(error.retryable),
                meta=storable_json(error.meta),
            )
        text = storable(str(error))
    except Exception:
        # Task code owns the exception: its __str__ (or its meta) may raise, or nest
        # too deep to copy. The attempt still fails, with what is known for sure.
        return RunFailure(
            code=ErrorCode.TASK_FAILED.value,
            message=f"Task raised {type(error).__name__}, which could not be described.",
            retryable=True,
            meta={"exception_type": storable(type(error).__qualname__)},
        )
    return RunFailure(
        code=ErrorCode.TASK_FAILED.value,
        message=f"Task raised {type(error).__name__}.",
        retryable=True,
        meta={"exception_type": type(error).__qualname__, "detail": text[:2000]},
    )
