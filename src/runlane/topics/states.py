"""The delivery state machine (contract 5.6) as pure compare-and-set transitions.

A delivery is a run, so it uses the run statuses and events, plus two statuses
and three events tasks lack. They are defined here until the run vocabulary in
``core`` gains them (the storage-facing enums change in the wiring step); the
values are the ones storage will hold.

Every function takes a :class:`DeliveryState` as read and returns the
:class:`DeliveryTransition` to apply only if the delivery's ``event_sequence`` is
still ``expected_sequence``: of two writers racing from one read, one wins and
the other is refused. :func:`apply_transition` is that rule over plain data, the
reference the drivers' transition SQL and ``project()`` must agree with.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
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
from runlane.types.retry import RetryPolicy
from runlane.types.runs import RunFailure
from runlane.types.storable_text import unstorable


class DeliveryStatus(StrEnum):
    """The statuses a delivery run can have; values are the stored run statuses.

    ``FAILED`` is absent on purpose: a delivery never fails, it is dead-lettered.
    """

    QUEUED = "queued"
    SCHEDULED = "scheduled"
    RUNNING = "running"
    RETRYING = "retrying"
    RELEASED = "released"
    CANCELLATION_REQUESTED = "cancellation_requested"
    SUCCEEDED = "succeeded"
    CANCELLED = "cancelled"
    #: Parked for an operator: not terminal, not claimable, holds no lease.
    DEAD_LETTERED = "dead_lettered"
    #: An operator gave up on a dead letter: terminal.
    DISCARDED = "discarded"


class DeliveryEventType(StrEnum):
    """The run events only deliveries append (the others are the run events of tasks)."""

    DEAD_LETTERED = "run.dead_lettered"
    REPLAYED = "run.replayed"
    DISCARDED = "run.discarded"


#: The run events deliveries share with tasks, by their stored names.
SUCCEEDED_EVENT = "run.succeeded"
RETRY_SCHEDULED_EVENT = "run.retry_scheduled"
RELEASED_EVENT = "run.released"
CANCELLED_EVENT = "run.cancelled"
LEASE_EXPIRED_EVENT = "run.lease_expired"

#: A worker may claim these once ``run_at`` has passed (and the key rules allow).
CLAIMABLE_DELIVERY_STATUSES = frozenset(
    {
        DeliveryStatus.QUEUED,
        DeliveryStatus.SCHEDULED,
        DeliveryStatus.RETRYING,
        DeliveryStatus.RELEASED,
    }
)
#: A worker holds the delivery's lease in these.
LEASED_DELIVERY_STATUSES = frozenset(
    {DeliveryStatus.RUNNING, DeliveryStatus.CANCELLATION_REQUESTED}
)
#: Nothing changes a delivery in these any more.
TERMINAL_DELIVERY_STATUSES = frozenset(
    {DeliveryStatus.SUCCEEDED, DeliveryStatus.CANCELLED, DeliveryStatus.DISCARDED}
)
#: An ORDERED key's head is its unfinished delivery of lowest sequence (5.7).
UNFINISHED_DELIVERY_STATUSES = frozenset(DeliveryStatus) - TERMINAL_DELIVERY_STATUSES


@dataclass(frozen=True, slots=True)
class DeliveryState:
    """What a transition or claim rule reads of one delivery run."""

    id: str
    subscription: str
    status: DeliveryStatus
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
            self.status in LEASED_DELIVERY_STATUSES
            and self.lease_expires_at is not None
            and self.lease_expires_at > now
        )


@dataclass(frozen=True, slots=True)
class DeliveryEvent:
    """One event a transition appends: its stored type and JSON data."""

    type: str
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class DeliveryTransition:
    """A compare-and-set write: apply only while ``event_sequence == expected_sequence``.

    Fields left ``None`` keep the stored value, except the lease, which every
    transition here ends (none keeps a delivery leased).
    """

    run_id: str
    expected_sequence: int
    status: DeliveryStatus
    events: tuple[DeliveryEvent, ...]
    run_at: datetime | None = None
    #: The failure stored on the run after the write (``None`` clears it).
    failure: RunFailure | None = None
    add_failure: bool = False
    #: Replay: the retry budget restarts.
    reset_failures: bool = False
    #: Replay: the new count of replays.
    replays: int | None = None
    dead_letter_reason: str | None = None
    dead_lettered_at: datetime | None = None
    #: Settles are fenced: only the lease holder's token may apply them.
    lease_token: str | None = None


def settle_delivery(
    delivery: DeliveryState,
    decision: DeliveryDecision,
    now: datetime,
    *,
    lease_expired: bool = False,
) -> DeliveryTransition:
    """The transition that ends the attempt a leased ``delivery`` is in.

    A delivery whose cancellation was requested ends CANCELLED however the
    attempt ended (it is never retried or dead-lettered, 5.7.1). With
    ``lease_expired`` the events start with ``run.lease_expired``.
    """
    if delivery.status not in LEASED_DELIVERY_STATUSES or delivery.lease_token is None:
        raise RunlaneError(
            ErrorCode.INVALID_STATE,
            f"delivery {delivery.id} holds no lease (status {delivery.status.value}); "
            "no attempt to settle.",
            meta={"run_id": delivery.id, "status": delivery.status.value},
        )
    events: list[DeliveryEvent] = []
    if lease_expired:
        expiry = {"attempt": delivery.attempt, "worker_id": delivery.lease_owner}
        events.append(DeliveryEvent(LEASE_EXPIRED_EVENT, expiry))
    attempt = delivery.attempt
    fields: dict[str, Any] = {}
    if delivery.status is DeliveryStatus.CANCELLATION_REQUESTED:
        status = DeliveryStatus.CANCELLED
        fields["failure"] = delivery.failure
        events.append(
            DeliveryEvent(CANCELLED_EVENT, {"reason": delivery.cancel_reason, "attempt": attempt})
        )
    elif isinstance(decision, Complete):
        status = DeliveryStatus.SUCCEEDED
        events.append(DeliveryEvent(SUCCEEDED_EVENT, {"attempt": attempt}))
    elif isinstance(decision, ReleaseFor):
        status = DeliveryStatus.RELEASED
        run_at = now + timedelta(seconds=decision.delay)
        fields.update(run_at=run_at, failure=delivery.failure)
        events.append(
            DeliveryEvent(
                RELEASED_EVENT,
                {"attempt": attempt, "reason": decision.reason, "run_at": run_at.isoformat()},
            )
        )
    elif isinstance(decision, RetryAfter):
        status = DeliveryStatus.RETRYING
        run_at = now + timedelta(seconds=decision.delay)
        fields.update(run_at=run_at, failure=decision.failure, add_failure=True)
        events.append(
            DeliveryEvent(
                RETRY_SCHEDULED_EVENT,
                {
                    "attempt": attempt,
                    "failure": decision.failure.to_json(),
                    "retry_at": run_at.isoformat(),
                },
            )
        )
    else:
        status = DeliveryStatus.DEAD_LETTERED
        failure = decision.failure
        fields.update(
            failure=failure,
            add_failure=failure is not None,
            dead_letter_reason=decision.reason,
            dead_lettered_at=now,
        )
        events.append(
            DeliveryEvent(
                DeliveryEventType.DEAD_LETTERED.value,
                {
                    "attempt": attempt,
                    "reason": decision.reason,
                    "failure": None if failure is None else failure.to_json(),
                },
            )
        )
    return DeliveryTransition(
        run_id=delivery.id,
        expected_sequence=delivery.event_sequence,
        status=status,
        events=tuple(events),
        lease_token=delivery.lease_token,
        **fields,
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
) -> DeliveryTransition:
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
) -> DeliveryTransition:
    """DEAD_LETTERED → QUEUED: same run, fresh retry budget, same place in its key's order.

    The failure stays on the run until the next attempt ends.
    """
    checked_reason = check_operator_reason(reason, required=False, action="replay")
    checked_actor = validate_optional_identifier(actor, name="actor")
    _require_dead_lettered(delivery, "replay")
    replays = delivery.replays + 1
    return DeliveryTransition(
        run_id=delivery.id,
        expected_sequence=delivery.event_sequence,
        status=DeliveryStatus.QUEUED,
        events=(
            DeliveryEvent(
                DeliveryEventType.REPLAYED.value,
                {"reason": checked_reason, "actor": checked_actor, "replays": replays},
            ),
        ),
        run_at=now,
        failure=delivery.failure,
        reset_failures=True,
        replays=replays,
    )


def discard_dead_letter(
    delivery: DeliveryState, *, reason: str, actor: str | None = None
) -> DeliveryTransition:
    """DEAD_LETTERED → DISCARDED (terminal); an ORDERED key moves on to its next delivery."""
    checked_reason = check_operator_reason(reason, required=True, action="discard")
    checked_actor = validate_optional_identifier(actor, name="actor")
    _require_dead_lettered(delivery, "discard")
    return DeliveryTransition(
        run_id=delivery.id,
        expected_sequence=delivery.event_sequence,
        status=DeliveryStatus.DISCARDED,
        events=(
            DeliveryEvent(
                DeliveryEventType.DISCARDED.value,
                {"reason": checked_reason, "actor": checked_actor},
            ),
        ),
        failure=delivery.failure,
    )


def _require_dead_lettered(delivery: DeliveryState, action: str) -> None:
    if delivery.status is not DeliveryStatus.DEAD_LETTERED:
        raise RunlaneError(
            ErrorCode.INVALID_STATE,
            f"delivery {delivery.id} is {delivery.status.value}, not dead-lettered; only a "
            f"dead letter can be {'replayed' if action == 'replay' else 'discarded'}.",
            meta={"run_id": delivery.id, "status": delivery.status.value},
        )


def apply_transition(
    delivery: DeliveryState, transition: DeliveryTransition, now: datetime
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
    failure_count = 0 if transition.reset_failures else delivery.failure_count
    return replace(
        delivery,
        status=transition.status,
        run_at=transition.run_at or delivery.run_at,
        event_sequence=delivery.event_sequence + len(transition.events),
        failure_count=failure_count + int(transition.add_failure),
        replays=delivery.replays if transition.replays is None else transition.replays,
        lease_token=None,
        lease_owner=None,
        lease_expires_at=None,
        failure=transition.failure,
        dead_letter_reason=transition.dead_letter_reason or delivery.dead_letter_reason,
        dead_lettered_at=transition.dead_lettered_at or delivery.dead_lettered_at,
    )


class RunsOperation(StrEnum):
    """The ``rl.runs`` operations that treat deliveries differently from task runs (5.6)."""

    CANCEL = "cancel"
    RETRY = "retry"
    RERUN = "rerun"


def refuse_runs_operation(operation: RunsOperation, delivery: DeliveryState) -> None:
    """Raise what ``rl.runs`` raises when ``operation`` is asked of a delivery; else nothing."""
    if operation is RunsOperation.CANCEL and delivery.status is not DeliveryStatus.DEAD_LETTERED:
        return
    raise RunlaneError(
        ErrorCode.INVALID_STATE,
        f"run {delivery.id} is a delivery of subscription {delivery.subscription!r}; "
        f"rl.runs.{operation.value} does not apply to deliveries ({delivery.status.value}): "
        "use rl.dead_letters to replay or discard it.",
        meta={"run_id": delivery.id, "status": delivery.status.value},
    )
