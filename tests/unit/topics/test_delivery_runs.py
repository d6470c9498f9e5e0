"""Deliveries as stored runs: the storage transitions the delivery rules (5.6) compute
from a run read through ``delivery_state`` leave exactly what ``project()`` (and so the
drivers' transition SQL) holds."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from runlane import RetryPolicy
from runlane.model.transitions import project
from runlane.topics.outcomes import (
    Complete,
    DeadLetterWith,
    DeliveryDecision,
    ReleaseFor,
    RetryAfter,
)
from runlane.topics.states import (
    apply_transition,
    delivery_state,
    discard_dead_letter,
    expire_delivery_lease,
    replay_dead_letter,
    settle_delivery,
)
from runlane.types.records import Transition
from runlane.types.runs import (
    Lease,
    Run,
    RunEventType,
    RunFailure,
    RunSource,
    RunSourceType,
    RunStatus,
    SubscriptionMode,
)

NOW = datetime(2030, 1, 1, 12, tzinfo=UTC)
BOOM = RunFailure(code="task_failed", message="Task raised ValueError.", retryable=True)
SPENT = RetryPolicy(max_attempts=1, initial_delay="10s", jitter=False)


def _run(status: RunStatus = RunStatus.RUNNING, **changes: Any) -> Run:
    run = Run(
        id="run-1",
        environment="test",
        task_id="orders.email",
        queue="main",
        status=status,
        payload={"order": 1},
        attempt=2,
        failure_count=1,
        run_at=NOW - timedelta(seconds=5),
        created_at=NOW - timedelta(minutes=1),
        updated_at=NOW - timedelta(seconds=5),
        event_sequence=4,
        source=RunSource(RunSourceType.PUBLISH, topic="orders", message_id="m-1"),
        failure=BOOM,
        lease=Lease("worker-1", "token-1", NOW + timedelta(seconds=30)),
        partition_key="customer-1",
        mode=SubscriptionMode.ORDERED,
        message_sequence=7,
    )
    return dataclasses.replace(run, **changes)


def _dead() -> Run:
    return _run(
        RunStatus.DEAD_LETTERED,
        lease=None,
        dead_letter_reason="poison",
        dead_lettered_at=NOW - timedelta(minutes=1),
        replays=1,
    )


def _agree(run: Run, transition: Transition) -> Run:
    stored = project(run, transition, NOW)
    assert delivery_state(stored) == apply_transition(delivery_state(run), transition, NOW)
    return stored


@pytest.mark.parametrize(
    "decision",
    [Complete(), RetryAfter(10.0, BOOM), ReleaseFor(5.0, "busy"), DeadLetterWith("poison", BOOM)],
)
def test_settling_a_delivery_run_stores_what_the_rules_say(decision: DeliveryDecision) -> None:
    run = _run()
    _agree(run, settle_delivery(delivery_state(run), decision, NOW))


def test_a_dead_letter_is_stored_with_its_reason_time_and_counted_failure() -> None:
    stored = _agree(_run(), settle_delivery(delivery_state(_run()), DeadLetterWith("x", BOOM), NOW))
    assert stored.status is RunStatus.DEAD_LETTERED and stored.lease is None
    assert (stored.dead_letter_reason, stored.dead_lettered_at) == ("x", NOW)
    assert stored.failure_count == 2


def test_a_lease_expiring_on_the_last_attempt_dead_letters_and_requires_the_expiry() -> None:
    run = _run(failure_count=0)
    transition = expire_delivery_lease(delivery_state(run), NOW, SPENT)
    assert transition.lease_expired_by == NOW and transition.lease_token == "token-1"
    assert [e.type for e in transition.events] == [
        RunEventType.LEASE_EXPIRED,
        RunEventType.DEAD_LETTERED,
    ]
    stored = _agree(run, transition)
    assert stored.status is RunStatus.DEAD_LETTERED and stored.dead_letter_reason == "lease_expired"


def test_a_cancelled_delivery_keeps_its_cancel_reason() -> None:
    run = _run(RunStatus.CANCELLATION_REQUESTED, cancel_reason="customer left")
    stored = _agree(run, settle_delivery(delivery_state(run), Complete(), NOW))
    assert stored.status is RunStatus.CANCELLED and stored.cancel_reason == "customer left"


def test_a_replay_queues_the_run_with_a_fresh_budget_and_one_more_replay() -> None:
    stored = _agree(_dead(), replay_dead_letter(delivery_state(_dead()), NOW, actor="ops"))
    assert stored.status is RunStatus.QUEUED and stored.run_at == NOW
    assert (stored.failure_count, stored.replays, stored.failure) == (0, 2, BOOM)
    assert stored.message_sequence == 7 and stored.partition_key == "customer-1"


def test_a_discard_ends_the_run() -> None:
    stored = _agree(_dead(), discard_dead_letter(delivery_state(_dead()), reason="obsolete"))
    assert stored.status is RunStatus.DISCARDED and stored.is_terminal


def test_a_task_run_is_not_a_delivery() -> None:
    with pytest.raises(ValueError, match="not a delivery"):
        delivery_state(_run(mode=None))
