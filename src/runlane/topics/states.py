"""The delivery state machine (contract 5.6) as pure compare-and-set transitions.

A delivery is a run: its statuses are :class:`~runlane.types.runs.RunStatus`
(all but ``FAILED``) and its events :class:`~runlane.types.runs.RunEventType`, so
what the rules decide is what storage holds, with nothing to translate.

Every function takes a :class:`DeliveryState` as read (:func:`delivery_state` reads
one from a stored run) and returns the storage
:class:`~runlane.types.records.Transition` to apply only if the delivery's
``event_sequence`` is still ``expected_sequence``: of two writers racing from one
read, one wins and the other is refused. :func:`apply_transition` is that rule over
plain data, the reference the drivers' transition SQL and ``project()`` must agree
with.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from runlane.topics.constants import MAX_OPERATOR_REASON
from runlane.topics.definitions import SubscriptionMode
from runlane.topics.outcomes import (
    Complete,
    DeadLetterReason,
    DeadLetterWith,
    DeliveryDecision,
    ReleaseFor,
    RetryAfter,
)
from runlane.types.errors import ErrorCode, RunlaneError, configuration_error
from runlane.types.ids import validate_optional_identifier
from runlane.types.records import NewEvent, RunChanges, Transition
from runlane.types.retry import RetryPolicy
from runlane.types.runs import LEASED_STATUSES, Run, RunEventType, RunFailure, RunStatus
from runlane.types.storable_text import unstorable

#: The run statuses a delivery can have, in the run vocabulary's order: every one
#: but ``FAILED`` (a delivery never fails, it is dead-lettered). Which of them are
#: claimable, leased, unfinished or terminal is the run vocabulary's to say
#: (``runlane.types.runs``).
DELIVERY_STATUSES = tuple(
    status for status in RunStatus if status not in (RunStatus.FAILED, RunStatus.WAITING)
)


@dataclass(frozen=True, slots=True)
class DeliveryState:
    """What a transition or claim rule reads of one delivery run."""

    id: str
    subscription: str
    status: RunStatus
    #: Stored at publish (5.7.2): later changes of the subscription apply to later messages.
    mode: SubscriptionMode = SubscriptionMode.NONE
    key: str | None = None
    #: The message's sequence (5.7.4).
    sequence: int = 0
    run_at: datetime = datetime.min
    event_sequence: int = 1
    attempt: int = 0
    #: Failures since publish or the last replay: the retry budget's count.
    failure_count: int = 0
    replays: int = 0
    lease_token: str | None = None
    lease_owner: str | None = None
    lease_expires_at: datetime | None = None
    failure: RunFailure | None = None
    cancel_reason: str | None = None
    dead_letter_reason: str | None = None
    dead_lettered_at: datetime | None = None

    def holds_lease(self, now: datetime) -> bool:
        """Whether a worker holds an unexpired lease on this delivery at ``now``."""
        return (
            self.status in LEASED_STATUSES
            and self.lease_expires_at is not None
            and self.lease_expires_at > now
        )


def delivery_state(run: Run) -> DeliveryState:
    """The delivery rules' view of a stored delivery run.

    ``ValueError`` for a task run, or a FAILED one: neither is a delivery
    (``INVALID_STATE`` for a delivery in the wrong status is the rules' to raise).
    """
    if run.mode is None or run.status not in DELIVERY_STATUSES:
        raise ValueError(f"run {run.id} is not a delivery (status {run.status.value})")
    lease = run.lease
    return DeliveryState(
        id=run.id,
        subscription=run.task_id,
        status=run.status,
        mode=run.mode,
        key=run.partition_key,
        sequence=run.message_sequence or 0,
        run_at=run.run_at,
        event_sequence=run.event_sequence,
        attempt=run.attempt,
        failure_count=run.failure_count,
        replays=run.replays,
        lease_token=lease.token if lease is not None else None,
        lease_owner=lease.owner if lease is not None else None,
        lease_expires_at=lease.expires_at if lease is not None else None,
        failure=run.failure,
        cancel_reason=run.cancel_reason,
        dead_letter_reason=run.dead_letter_reason,
        dead_lettered_at=run.dead_lettered_at,
    )


def settle_delivery(
    delivery: DeliveryState,
    decision: DeliveryDecision,
    now: datetime,
    *,
    lease_expired: bool = False,
) -> Transition:
    """The transition that ends the attempt a leased ``delivery`` is in.

    A delivery whose cancellation was requested ends CANCELLED however the
    attempt ended (it is never retried or dead-lettered, 5.7.1). With
    ``lease_expired`` the events start with ``run.lease_expired`` and the write
    also requires the lease to have expired by ``now`` (``tick`` recovering it).
    """
    if delivery.status not in LEASED_STATUSES or delivery.lease_token is None:
        raise RunlaneError(
            ErrorCode.INVALID_STATE,
            f"delivery {delivery.id} holds no lease (status {delivery.status.value}); "
            "no attempt to settle.",
            meta={"run_id": delivery.id, "status": delivery.status.value},
        )
    events: list[NewEvent] = []
    if lease_expired:
        expiry = {"attempt": delivery.attempt, "worker_id": delivery.lease_owner}
        events.append(NewEvent(RunEventType.LEASE_EXPIRED, expiry))
    attempt = delivery.attempt
    fields: dict[str, Any] = {}
    if delivery.status is RunStatus.CANCELLATION_REQUESTED:
        status = RunStatus.CANCELLED
        fields["failure"] = delivery.failure
        events.append(
            NewEvent(RunEventType.CANCELLED, {"reason": delivery.cancel_reason, "attempt": attempt})
        )
    elif isinstance(decision, Complete):
        status = RunStatus.SUCCEEDED
        events.append(NewEvent(RunEventType.SUCCEEDED, {"attempt": attempt}))
    elif isinstance(decision, ReleaseFor):
        status = RunStatus.RELEASED
        run_at = now + timedelta(seconds=decision.delay)
        fields.update(run_at=run_at, failure=delivery.failure)
        events.append(
            NewEvent(
                RunEventType.RELEASED,
                {"attempt": attempt, "reason": decision.reason, "run_at": run_at.isoformat()},
            )
        )
    elif isinstance(decision, RetryAfter):
        status = RunStatus.RETRYING
        run_at = now + timedelta(seconds=decision.delay)
        fields.update(run_at=run_at, failure=decision.failure, add_failure=True)
        events.append(
            NewEvent(
                RunEventType.RETRY_SCHEDULED,
                {
                    "attempt": attempt,
                    "failure": decision.failure.to_json(),
                    "retry_at": run_at.isoformat(),
                },
            )
        )
    else:
        status = RunStatus.DEAD_LETTERED
        failure = decision.failure
        fields.update(
            failure=failure,
            add_failure=failure is not None,
            dead_letter_reason=decision.reason,
            dead_lettered_at=now,
        )
        events.append(
            NewEvent(
                RunEventType.DEAD_LETTERED,
                {
                    "attempt": attempt,
                    "reason": decision.reason,
                    "failure": None if failure is None else failure.to_json(),
                },
            )
        )
    return Transition(
        run_id=delivery.id,
        expected_sequence=delivery.event_sequence,
        changes=RunChanges(status=status, cancel_reason=delivery.cancel_reason, **fields),
        events=tuple(events),
        lease_token=delivery.lease_token,
        lease_expired_by=now if lease_expired else None,
    )


#: What a lease that expired on a retry-able attempt is stored as (as for tasks).
LEASE_EXPIRED_FAILURE = RunFailure(
    code=ErrorCode.LEASE_EXPIRED.value,
    message="The worker's lease expired before the attempt finished.",
    retryable=True,
)


def expire_delivery_lease(
    delivery: DeliveryState,
    now: datetime,
    policy: RetryPolicy,
    rng: random.Random | None = None,
) -> Transition:
    """``tick`` found the lease expired: retry while the budget lasts, else dead-letter."""
    failures = delivery.failure_count + 1
    if policy.has_budget(failures):
        decision: DeliveryDecision = RetryAfter(
            policy.delay_after(failures, rng), LEASE_EXPIRED_FAILURE
        )
    else:
        decision = DeadLetterWith(DeadLetterReason.LEASE_EXPIRED.value, LEASE_EXPIRED_FAILURE)
    return settle_delivery(delivery, decision, now, lease_expired=True)


def check_operator_reason(reason: object, *, required: bool, action: str) -> str | None:
    """A replay or discard reason as given, or ``CONFIGURATION_INVALID`` (5.8)."""
    if reason is None and not required:
        return None
    if not required and not isinstance(reason, str):
        raise configuration_error(
            f"{action} reason must be a string of at most {MAX_OPERATOR_REASON} characters "
            f"or None (it is optional), got {type(reason).__name__}."
        )
    if not isinstance(reason, str) or (required and not reason.strip()):
        raise configuration_error(
            f"{action} needs a reason: a non-empty string of at most {MAX_OPERATOR_REASON} "
            f"characters, got {reason!r}."
        )
    if len(reason) > MAX_OPERATOR_REASON:
        raise configuration_error(
            f"{action} reason is {len(reason)} characters long; keep it to {MAX_OPERATOR_REASON}."
        )
    problem = unstorable(reason)
    if problem is not None:
        raise configuration_error(f"{action} reason must not contain {problem}.")
    return reason


def replay_dead_letter(
    delivery: DeliveryState, now: datetime, *, reason: str | None = None, actor: str | None = None
) -> Transition:
    """DEAD_LETTERED → QUEUED: same run, fresh retry budget, same place in its key's order.

    The failure stays on the run until the next attempt ends.
    """
    checked_reason = check_operator_reason(reason, required=False, action="replay")
    checked_actor = validate_optional_identifier(actor, name="actor")
    _require_dead_lettered(delivery, "replay")
    replays = delivery.replays + 1
    return Transition(
        run_id=delivery.id,
        expected_sequence=delivery.event_sequence,
        changes=RunChanges(
            status=RunStatus.QUEUED,
            run_at=now,
            failure=delivery.failure,
            cancel_reason=delivery.cancel_reason,
            reset_failures=True,
            replays=replays,
        ),
        events=(
            NewEvent(
                RunEventType.REPLAYED,
                {"reason": checked_reason, "actor": checked_actor, "replays": replays},
            ),
        ),
    )


def discard_dead_letter(
    delivery: DeliveryState, *, reason: str, actor: str | None = None
) -> Transition:
    """DEAD_LETTERED → DISCARDED (terminal); an ORDERED key moves on to its next delivery."""
    checked_reason = check_operator_reason(reason, required=True, action="discard")
    checked_actor = validate_optional_identifier(actor, name="actor")
    _require_dead_lettered(delivery, "discard")
    return Transition(
        run_id=delivery.id,
        expected_sequence=delivery.event_sequence,
        changes=RunChanges(
            status=RunStatus.DISCARDED,
            failure=delivery.failure,
            cancel_reason=delivery.cancel_reason,
        ),
        events=(
            NewEvent(RunEventType.DISCARDED, {"reason": checked_reason, "actor": checked_actor}),
        ),
    )


def _require_dead_lettered(delivery: DeliveryState, action: str) -> None:
    if delivery.status is not RunStatus.DEAD_LETTERED:
        raise RunlaneError(
            ErrorCode.INVALID_STATE,
            f"delivery {delivery.id} is {delivery.status.value}, not dead-lettered; only a "
            f"dead letter can be {'replayed' if action == 'replay' else 'discarded'}.",
            meta={"run_id": delivery.id, "status": delivery.status.value},
        )


def apply_transition(
    delivery: DeliveryState, transition: Transition, now: datetime
) -> DeliveryState:
    """The delivery after storage applied ``transition`` at ``now``, or ``INVALID_STATE``.

    The compare-and-set rule: a transition computed from an older read (its
    ``expected_sequence`` is not the delivery's ``event_sequence``) or a settle
    by a worker whose lease token is no longer the delivery's is refused.
    """
    if transition.run_id != delivery.id:
        raise ValueError("the transition belongs to another delivery")
    stale = transition.expected_sequence != delivery.event_sequence
    fenced = transition.lease_token is not None and transition.lease_token != delivery.lease_token
    if stale or fenced:
        raise RunlaneError(
            ErrorCode.INVALID_STATE,
            f"delivery {delivery.id} changed since it was read (now {delivery.status.value}); "
            "read it again before changing it.",
            meta={"run_id": delivery.id, "status": delivery.status.value},
        )
    changes = transition.changes
    failure_count = 0 if changes.reset_failures else delivery.failure_count
    return replace(
        delivery,
        status=changes.status,
        run_at=changes.run_at or delivery.run_at,
        event_sequence=delivery.event_sequence + len(transition.events),
        failure_count=failure_count + int(changes.add_failure),
        replays=delivery.replays if changes.replays is None else changes.replays,
        lease_token=None,
        lease_owner=None,
        lease_expires_at=None,
        failure=changes.failure,
        cancel_reason=changes.cancel_reason,
        dead_letter_reason=changes.dead_letter_reason or delivery.dead_letter_reason,
        dead_lettered_at=changes.dead_lettered_at or delivery.dead_lettered_at,
    )


class RunsOperation(StrEnum):
    """The ``rl.runs`` operations that treat deliveries differently from task runs (5.6)."""

    CANCEL = "cancel"
    RETRY = "retry"
    RERUN = "rerun"


def refuse_runs_operation(operation: RunsOperation, delivery: DeliveryState) -> None:
    """Raise what ``rl.runs`` raises when ``operation`` is asked of a delivery; else nothing."""
    if operation is RunsOperation.CANCEL and delivery.status is not RunStatus.DEAD_LETTERED:
        return
    raise RunlaneError(
        ErrorCode.INVALID_STATE,
        f"run {delivery.id} is a delivery of subscription {delivery.subscription!r}; "
        f"rl.runs.{operation.value} does not apply to deliveries ({delivery.status.value}): "
        "use rl.dead_letters to replay or discard it.",
        meta={"run_id": delivery.id, "status": delivery.status.value},
    )
