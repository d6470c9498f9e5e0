"""Contract 5.6: the delivery state machine as compare-and-set transitions."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from runlane import ErrorCode, RetryPolicy, RunlaneError
from runlane.topics.definitions import SubscriptionMode
from runlane.topics.outcomes import Complete, DeadLetterWith, ReleaseFor, RetryAfter
from runlane.topics.states import (
    DELIVERY_STATUSES,
    LEASE_EXPIRED_FAILURE,
    DeliveryState,
    RunsOperation,
    apply_transition,
    discard_dead_letter,
    expire_delivery_lease,
    refuse_runs_operation,
    replay_dead_letter,
    settle_delivery,
)
from runlane.types.runs import (
    TERMINAL_STATUSES,
    UNFINISHED_STATUSES,
    RunEventType,
    RunFailure,
    RunStatus,
)

NOW = datetime(2030, 1, 1, 12, tzinfo=UTC)
BOOM = RunFailure(code="task_failed", message="Task raised ValueError.", retryable=True)
NO_JITTER = RetryPolicy(max_attempts=3, initial_delay="10s", max_delay="1m", jitter=False)


def _leased(**changes: Any) -> DeliveryState:
    delivery = DeliveryState(
        id="run-1",
        subscription="orders.email",
        status=RunStatus.RUNNING,
        mode=SubscriptionMode.ORDERED,
        key="customer-1",
        sequence=7,
        run_at=NOW - timedelta(seconds=5),
        event_sequence=4,
        attempt=2,
        failure_count=1,
        lease_token="token-1",
        lease_owner="worker-1",
        lease_expires_at=NOW + timedelta(seconds=30),
    )
    return dataclasses.replace(delivery, **changes)


def _dead_letter(**changes: Any) -> DeliveryState:
    settled = apply_transition(
        _leased(), settle_delivery(_leased(), DeadLetterWith("poison", BOOM), NOW), NOW
    )
    return dataclasses.replace(settled, **changes)


def _events(transition: Any) -> list[tuple[str, dict[str, Any]]]:
    return [(event.type, event.data) for event in transition.events]


# --- vocabulary ---


def test_a_delivery_can_have_every_run_status_but_failed_and_waiting() -> None:
    # Deliveries are created by a publish, never after other runs.
    assert set(DELIVERY_STATUSES) == set(RunStatus) - {RunStatus.FAILED, RunStatus.WAITING}


def test_dead_lettered_is_unfinished_and_discarded_is_terminal() -> None:
    assert RunStatus.DEAD_LETTERED in UNFINISHED_STATUSES
    assert RunStatus.DISCARDED in TERMINAL_STATUSES
    assert RunStatus.DEAD_LETTERED not in TERMINAL_STATUSES


def test_the_delivery_events_are_named_as_the_contract_says() -> None:
    assert (RunEventType.DEAD_LETTERED, RunEventType.REPLAYED, RunEventType.DISCARDED) == (
        "run.dead_lettered",
        "run.replayed",
        "run.discarded",
    )


# --- settling an attempt ---


def test_complete_succeeds_and_appends_run_succeeded() -> None:
    transition = settle_delivery(_leased(), Complete(), NOW)

    assert transition.changes.status is RunStatus.SUCCEEDED
    assert _events(transition) == [("run.succeeded", {"attempt": 2})]
    assert (transition.expected_sequence, transition.lease_token) == (4, "token-1")


def test_a_retry_waits_until_its_run_at_and_counts_a_failure() -> None:
    transition = settle_delivery(_leased(), RetryAfter(30.0, BOOM), NOW)
    retry_at = NOW + timedelta(seconds=30)

    assert transition.changes.status is RunStatus.RETRYING
    assert transition.changes.run_at == retry_at
    assert transition.changes.add_failure is True
    assert _events(transition) == [
        (
            "run.retry_scheduled",
            {"attempt": 2, "failure": BOOM.to_json(), "retry_at": retry_at.isoformat()},
        )
    ]


def test_a_release_keeps_the_failure_and_spends_no_budget() -> None:
    transition = settle_delivery(_leased(failure=BOOM), ReleaseFor(60.0, "not yet"), NOW)

    assert transition.changes.status is RunStatus.RELEASED
    assert transition.changes.add_failure is False
    assert transition.changes.failure == BOOM
    assert _events(transition)[0][0] == "run.released"


def test_a_dead_letter_parks_with_reason_time_and_a_run_dead_lettered_event() -> None:
    transition = settle_delivery(_leased(), DeadLetterWith("max_attempts_exceeded", BOOM), NOW)

    assert transition.changes.status is RunStatus.DEAD_LETTERED
    assert (transition.changes.dead_letter_reason, transition.changes.dead_lettered_at) == (
        "max_attempts_exceeded",
        NOW,
    )
    assert _events(transition) == [
        (
            "run.dead_lettered",
            {"attempt": 2, "reason": "max_attempts_exceeded", "failure": BOOM.to_json()},
        )
    ]


def test_outcome_dead_letter_stores_no_failure() -> None:
    transition = settle_delivery(_leased(), DeadLetterWith("bad data", None), NOW)
    assert transition.changes.failure is None
    assert transition.changes.add_failure is False
    assert _events(transition)[0][1]["failure"] is None


@pytest.mark.parametrize(
    "decision", [Complete(), RetryAfter(1.0, BOOM), DeadLetterWith("poison", None)]
)
def test_a_requested_cancellation_ends_cancelled_whatever_the_handler_decided(
    decision: Any,
) -> None:
    delivery = _leased(status=RunStatus.CANCELLATION_REQUESTED, cancel_reason="stop")
    transition = settle_delivery(delivery, decision, NOW)

    assert transition.changes.status is RunStatus.CANCELLED
    assert _events(transition) == [("run.cancelled", {"reason": "stop", "attempt": 2})]


@pytest.mark.parametrize("status", [RunStatus.QUEUED, RunStatus.DEAD_LETTERED])
def test_only_a_leased_delivery_can_be_settled(status: RunStatus) -> None:
    with pytest.raises(RunlaneError) as raised:
        settle_delivery(_leased(status=status), Complete(), NOW)
    assert raised.value.code is ErrorCode.INVALID_STATE


def test_an_expired_lease_with_budget_left_retries_after_lease_expired() -> None:
    transition = expire_delivery_lease(_leased(failure_count=0), NOW, NO_JITTER)

    assert transition.changes.status is RunStatus.RETRYING
    assert transition.changes.failure == LEASE_EXPIRED_FAILURE
    assert [event.type for event in transition.events] == [
        "run.lease_expired",
        "run.retry_scheduled",
    ]


def test_an_expired_lease_on_the_last_attempt_dead_letters_with_reason_lease_expired() -> None:
    transition = expire_delivery_lease(_leased(failure_count=2), NOW, NO_JITTER)

    assert transition.changes.status is RunStatus.DEAD_LETTERED
    assert transition.changes.dead_letter_reason == "lease_expired"
    assert [event.type for event in transition.events] == [
        "run.lease_expired",
        "run.dead_lettered",
    ]


def test_a_cancelled_delivery_whose_lease_expired_ends_cancelled_not_dead_lettered() -> None:
    delivery = _leased(status=RunStatus.CANCELLATION_REQUESTED, failure_count=2)
    transition = expire_delivery_lease(delivery, NOW, NO_JITTER)
    assert transition.changes.status is RunStatus.CANCELLED


# --- replay and discard ---


def test_replay_queues_the_same_run_now_with_a_fresh_budget_and_its_place_kept() -> None:
    parked = _dead_letter()
    later = NOW + timedelta(hours=1)
    transition = replay_dead_letter(parked, later, reason="fixed upstream", actor="ops.alice")
    replayed = apply_transition(parked, transition, later)

    assert replayed.status is RunStatus.QUEUED
    assert replayed.run_at == later
    assert replayed.failure_count == 0
    assert replayed.replays == 1
    assert (replayed.key, replayed.sequence, replayed.id) == (parked.key, parked.sequence, "run-1")
    assert replayed.failure == BOOM  # kept until the next attempt ends
    assert _events(transition) == [
        ("run.replayed", {"reason": "fixed upstream", "actor": "ops.alice", "replays": 1})
    ]


def test_replay_reason_and_actor_are_optional() -> None:
    transition = replay_dead_letter(_dead_letter(replays=2), NOW)
    assert _events(transition) == [("run.replayed", {"reason": None, "actor": None, "replays": 3})]


def test_discard_is_terminal_and_keeps_the_reason_in_its_event() -> None:
    transition = discard_dead_letter(_dead_letter(), reason="bad batch", actor="ops.bob")

    assert transition.changes.status is RunStatus.DISCARDED
    assert _events(transition) == [("run.discarded", {"reason": "bad batch", "actor": "ops.bob"})]


@pytest.mark.parametrize(
    "status",
    [s for s in DELIVERY_STATUSES if s is not RunStatus.DEAD_LETTERED],
)
def test_only_a_dead_letter_can_be_replayed_or_discarded(status: RunStatus) -> None:
    delivery = _dead_letter(status=status)
    for act in (
        lambda: replay_dead_letter(delivery, NOW),
        lambda: discard_dead_letter(delivery, reason="no"),
    ):
        with pytest.raises(RunlaneError) as raised:
            act()
        assert raised.value.code is ErrorCode.INVALID_STATE
        assert raised.value.meta["status"] == status.value


@pytest.mark.parametrize(
    ("act", "says"),
    [
        (lambda d: discard_dead_letter(d, reason=""), "needs a reason"),
        (lambda d: discard_dead_letter(d, reason="  "), "needs a reason"),
        (lambda d: discard_dead_letter(d, reason=None), "needs a reason"),
        (lambda d: discard_dead_letter(d, reason="x" * 1001), "keep it to 1000"),
        (lambda d: discard_dead_letter(d, reason="nul\x00"), "must not contain"),
        (lambda d: replay_dead_letter(d, NOW, reason="\ud800"), "must not contain"),
        (lambda d: replay_dead_letter(d, NOW, reason=5), "or None (it is optional)"),
        (lambda d: replay_dead_letter(d, NOW, actor="a:b"), "must not contain ':'"),
        (lambda d: discard_dead_letter(d, reason="ok", actor=""), "non-empty"),
    ],
)
def test_bad_reasons_and_actors_are_refused_before_the_state_is_looked_at(
    act: Any, says: str
) -> None:
    # Even on a delivery that is not dead-lettered, the arguments are checked first.
    not_parked = _dead_letter(status=RunStatus.SUCCEEDED)
    with pytest.raises(RunlaneError) as raised:
        act(not_parked)
    assert raised.value.code is ErrorCode.CONFIGURATION_INVALID
    assert says in raised.value.message


def test_a_reason_of_1000_characters_is_allowed() -> None:
    transition = discard_dead_letter(_dead_letter(), reason="x" * 1000)
    assert transition.changes.status is RunStatus.DISCARDED


# --- compare-and-set ---


def test_of_a_concurrent_replay_and_discard_exactly_one_wins() -> None:
    parked = _dead_letter()
    replay = replay_dead_letter(parked, NOW)
    discard = discard_dead_letter(parked, reason="give up")

    replayed = apply_transition(parked, replay, NOW)
    with pytest.raises(RunlaneError) as raised:
        apply_transition(replayed, discard, NOW)
    assert raised.value.code is ErrorCode.INVALID_STATE

    discarded = apply_transition(parked, discard, NOW)
    with pytest.raises(RunlaneError):
        apply_transition(discarded, replay, NOW)


def test_a_settle_by_a_worker_whose_lease_was_taken_over_is_fenced() -> None:
    stale = settle_delivery(_leased(), Complete(), NOW)
    taken_over = _leased(lease_token="token-2")
    with pytest.raises(RunlaneError) as raised:
        apply_transition(taken_over, stale, NOW)
    assert raised.value.code is ErrorCode.INVALID_STATE


def test_applying_a_transition_ends_the_lease_and_advances_the_event_sequence() -> None:
    settled = apply_transition(_leased(), settle_delivery(_leased(), Complete(), NOW), NOW)
    assert (settled.lease_token, settled.lease_expires_at, settled.event_sequence) == (
        None,
        None,
        5,
    )


def test_a_transition_for_another_delivery_is_a_programming_error() -> None:
    with pytest.raises(ValueError):
        apply_transition(_leased(id="run-2"), settle_delivery(_leased(), Complete(), NOW), NOW)


# --- rl.runs on deliveries ---


def test_cancel_of_a_dead_letter_points_to_rl_dead_letters() -> None:
    with pytest.raises(RunlaneError) as raised:
        refuse_runs_operation(RunsOperation.CANCEL, _dead_letter())
    assert raised.value.code is ErrorCode.INVALID_STATE
    assert "rl.dead_letters" in raised.value.message


def test_cancel_of_a_waiting_or_running_delivery_is_allowed() -> None:
    refuse_runs_operation(RunsOperation.CANCEL, _leased())
    refuse_runs_operation(RunsOperation.CANCEL, _leased(status=RunStatus.QUEUED))


@pytest.mark.parametrize("operation", [RunsOperation.RETRY, RunsOperation.RERUN])
@pytest.mark.parametrize("status", DELIVERY_STATUSES)
def test_retry_and_rerun_of_any_delivery_are_refused(
    operation: RunsOperation, status: RunStatus
) -> None:
    with pytest.raises(RunlaneError) as raised:
        refuse_runs_operation(operation, _leased(status=status))
    assert raised.value.code is ErrorCode.INVALID_STATE
