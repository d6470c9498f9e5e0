"""The delivery state machine's transitions (:mod:`runlane.topics.states`) in the form
storage applies: a run read back as a :class:`DeliveryState`, and a
:class:`DeliveryTransition` as the compare-and-set :class:`Transition` of a run.

The pure rules stay in ``states``; this module only translates, so the reference
model and what the drivers write cannot drift apart.
"""

from __future__ import annotations

from datetime import datetime

from runlane.topics.definitions import SubscriptionMode
from runlane.topics.states import DeliveryState, DeliveryStatus, DeliveryTransition
from runlane.types.records import NewEvent, RunChanges, Transition
from runlane.types.runs import Run, RunEventType, RunStatus


def delivery_state(run: Run) -> DeliveryState:
    """What the delivery rules read of ``run`` (a delivery run, as storage holds it)."""
    lease = run.lease
    return DeliveryState(
        id=run.id,
        subscription=run.task_id,
        status=DeliveryStatus(run.status.value),
        mode=run.mode or SubscriptionMode.NONE,
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


def storage_transition(
    run: Run, transition: DeliveryTransition, *, lease_expired_by: datetime | None = None
) -> Transition:
    """``transition`` (computed from ``run``) as the run transition storage applies.

    ``lease_expired_by``: maintenance recovering an expired lease (the write then
    also requires the lease to have expired by that time).
    """
    status = RunStatus(transition.status.value)
    return Transition(
        run_id=transition.run_id,
        expected_sequence=transition.expected_sequence,
        changes=RunChanges(
            status=status,
            run_at=transition.run_at,
            failure=transition.failure,
            # A cancelled delivery keeps the reason its cancellation was asked with.
            cancel_reason=run.cancel_reason if status is RunStatus.CANCELLED else None,
            add_failure=transition.add_failure,
            dead_letter_reason=transition.dead_letter_reason,
            dead_lettered_at=transition.dead_lettered_at,
            replays=transition.replays,
            reset_failures=transition.reset_failures,
        ),
        events=tuple(NewEvent(RunEventType(event.type), event.data) for event in transition.events),
        lease_token=transition.lease_token,
        lease_expired_by=lease_expired_by,
    )
