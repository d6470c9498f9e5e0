"""Deliveries as the runs storage holds: a stored run read as a :class:`DeliveryState`,
and a :class:`DeliveryTransition` written as the storage :class:`Transition`.

Both are plain mappings, so the delivery rules of :mod:`runlane.topics.states`
apply to stored runs unchanged, and what storage then holds (``project()``, the
drivers' transition SQL) is what :func:`~runlane.topics.states.apply_transition`
says.
"""

from __future__ import annotations

from datetime import datetime

from runlane.topics.states import DeliveryState, DeliveryStatus, DeliveryTransition
from runlane.types.records import NewEvent, RunChanges, Transition
from runlane.types.runs import Run, RunEventType, RunStatus, SubscriptionMode


def delivery_state(run: Run) -> DeliveryState:
    """The delivery rules' view of a stored delivery run (``INVALID_STATE`` is the
    rules' to raise; a task run, or a FAILED one, is not a delivery)."""
    if run.mode is None or run.status is RunStatus.FAILED:
        raise ValueError(f"run {run.id} is not a delivery (status {run.status.value})")
    lease = run.lease
    return DeliveryState(
        id=run.id,
        subscription=run.task_id,
        status=DeliveryStatus(run.status.value),
        mode=SubscriptionMode(run.mode),
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
    transition: DeliveryTransition,
    *,
    cancel_reason: str | None = None,
    lease_expired_by: datetime | None = None,
) -> Transition:
    """``transition`` as the compare-and-set write storage applies.

    ``cancel_reason``: the run's, kept on the row (a settle writes it as it is);
    ``lease_expired_by``: ``tick`` recovering an expired lease (the write then also
    requires the lease to have expired by then).
    """
    return Transition(
        run_id=transition.run_id,
        expected_sequence=transition.expected_sequence,
        changes=RunChanges(
            status=RunStatus(transition.status.value),
            run_at=transition.run_at,
            failure=transition.failure,
            cancel_reason=cancel_reason,
            add_failure=transition.add_failure,
            dead_letter_reason=transition.dead_letter_reason,
            dead_lettered_at=transition.dead_lettered_at,
            replays=transition.replays,
            reset_failures=transition.reset_failures,
        ),
        events=tuple(NewEvent(RunEventType(e.type), dict(e.data)) for e in transition.events),
        lease_token=transition.lease_token,
        lease_expired_by=lease_expired_by,
    )
