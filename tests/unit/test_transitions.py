"""The pure state-transition rules, applied to plain Run objects built here."""

from __future__ import annotations

import dataclasses
import random
from datetime import UTC, datetime, timedelta

import pytest

from runlane import ErrorCode, RetryPolicy, RunlaneError, RunStatus
from runlane.model.transitions import (
    LEASE_EXPIRED_FAILURE,
    Failed,
    LeaseExpired,
    Released,
    Succeeded,
    project,
    request_cancellation,
    sanitize_exception,
    settle_attempt,
)
from runlane.ports.storage import Transition
from runlane.types.runs import (
    CLAIMABLE_STATUSES,
    TERMINAL_STATUSES,
    Lease,
    Run,
    RunEventType,
    RunFailure,
)

NOW = datetime(2030, 1, 1, 12, tzinfo=UTC)
LEASE = Lease(owner="worker-1", token="token-1", expires_at=NOW + timedelta(seconds=30))
NO_JITTER = RetryPolicy(max_attempts=3, initial_delay="10s", max_delay="1m", jitter=False)
BOOM = RunFailure(code="task_failed", message="Task raised ValueError.", retryable=True)
FATAL = RunFailure(code="task_failed", message="Refused.", retryable=False)


def _run(status: RunStatus = RunStatus.RUNNING, **changes: object) -> Run:
    leased = status in (RunStatus.RUNNING, RunStatus.CANCELLATION_REQUESTED)
    run = Run(
        id="run-1",
        environment="test",
        task_id="orders.record",
        queue="main",
        status=status,
        payload={"order_id": 7},
        attempt=1,
        failure_count=0,
        run_at=NOW - timedelta(seconds=5),
        created_at=NOW - timedelta(seconds=5),
        updated_at=NOW - timedelta(seconds=5),
        event_sequence=2,
        lease=LEASE if leased else None,
    )
    return dataclasses.replace(run, **changes)  # type: ignore[arg-type]


def _event_types(transition: Transition) -> list[RunEventType]:
    return [event.type for event in transition.events]


def _settle(run: Run, outcome: object, policy: RetryPolicy = NO_JITTER) -> Transition:
    return settle_attempt(run, outcome, policy, NOW)  # type: ignore[arg-type]


# -- settle_attempt --------------------------------------------------------------------


@pytest.mark.parametrize("status", sorted(CLAIMABLE_STATUSES | TERMINAL_STATUSES))
def test_an_attempt_cannot_be_settled_on_a_run_that_holds_no_lease(status: RunStatus) -> None:
    with pytest.raises(RunlaneError) as caught:
        _settle(_run(status), Succeeded("done"))
    assert caught.value.code is ErrorCode.INVALID_STATE


def test_a_running_run_without_a_lease_record_cannot_be_settled() -> None:
    with pytest.raises(RunlaneError) as caught:
        _settle(_run(lease=None), Succeeded("done"))
    assert caught.value.code is ErrorCode.INVALID_STATE


def test_success_ends_the_run_succeeded_with_its_result() -> None:
    transition = _settle(_run(), Succeeded({"total": 3}))
    assert transition.changes.status is RunStatus.SUCCEEDED
    assert transition.changes.result == {"total": 3}
    assert transition.changes.add_failure is False
    assert _event_types(transition) == [RunEventType.SUCCEEDED]
    assert transition.events[0].data == {"attempt": 1}


def test_every_settle_is_fenced_by_the_lease_token_and_the_event_sequence() -> None:
    transition = _settle(_run(), Succeeded(None))
    assert transition.run_id == "run-1"
    assert transition.lease_token == "token-1"
    assert transition.expected_sequence == 2
    assert transition.lease_expired_by is None


def test_a_retryable_failure_with_budget_left_schedules_a_retry_after_the_backoff() -> None:
    transition = _settle(_run(), Failed(BOOM))
    assert transition.changes.status is RunStatus.RETRYING
    assert transition.changes.run_at == NOW + timedelta(seconds=10)
    assert transition.changes.failure == BOOM
    assert transition.changes.add_failure is True
    assert _event_types(transition) == [RunEventType.RETRY_SCHEDULED]
    data = transition.events[0].data
    assert data["retry_at"] == (NOW + timedelta(seconds=10)).isoformat()
    assert data["failure"] == BOOM.to_json()


def test_the_backoff_grows_with_the_failures_already_counted() -> None:
    transition = _settle(_run(attempt=2, failure_count=1), Failed(BOOM))
    assert transition.changes.run_at == NOW + timedelta(seconds=20)


def test_jittered_retries_land_within_the_upper_half_of_the_backoff() -> None:
    policy = RetryPolicy(max_attempts=3, initial_delay="10s", max_delay="1m")
    transition = settle_attempt(_run(), Failed(BOOM), policy, NOW, random.Random(3))
    assert transition.changes.run_at is not None
    assert NOW + timedelta(seconds=5) <= transition.changes.run_at <= NOW + timedelta(seconds=10)


def test_a_retryable_failure_on_the_last_attempt_fails_the_run() -> None:
    transition = _settle(_run(attempt=3, failure_count=2), Failed(BOOM))
    assert transition.changes.status is RunStatus.FAILED
    assert transition.changes.add_failure is True
    assert transition.changes.run_at is None
    assert _event_types(transition) == [RunEventType.FAILED]


def test_a_non_retryable_failure_fails_the_run_at_once() -> None:
    transition = _settle(_run(), Failed(FATAL))
    assert transition.changes.status is RunStatus.FAILED
    assert transition.changes.failure == FATAL
    assert _event_types(transition) == [RunEventType.FAILED]


def test_a_release_waits_its_delay_and_spends_no_retry() -> None:
    transition = _settle(_run(attempt=3, failure_count=2), Released(30.0, "export not ready"))
    assert transition.changes.status is RunStatus.RELEASED
    assert transition.changes.run_at == NOW + timedelta(seconds=30)
    assert transition.changes.add_failure is False
    assert _event_types(transition) == [RunEventType.RELEASED]
    assert transition.events[0].data["reason"] == "export not ready"


def test_a_release_keeps_the_failure_of_an_earlier_attempt() -> None:
    transition = _settle(_run(failure=BOOM, failure_count=1), Released(0.0, None))
    assert transition.changes.failure == BOOM


def test_an_expired_lease_counts_as_a_failed_attempt_and_follows_the_retry_policy() -> None:
    transition = _settle(_run(), LeaseExpired())
    assert transition.changes.status is RunStatus.RETRYING
    assert transition.changes.failure == LEASE_EXPIRED_FAILURE
    assert transition.changes.add_failure is True
    assert _event_types(transition) == [RunEventType.LEASE_EXPIRED, RunEventType.RETRY_SCHEDULED]
    assert transition.events[0].data == {"attempt": 1, "worker_id": "worker-1"}


def test_an_expired_lease_is_only_applied_if_the_lease_really_expired_by_now() -> None:
    transition = _settle(_run(), LeaseExpired())
    assert transition.lease_expired_by == NOW
    assert transition.lease_token == "token-1"


def test_an_expired_lease_on_the_last_attempt_fails_the_run() -> None:
    transition = _settle(_run(attempt=3, failure_count=2), LeaseExpired())
    assert transition.changes.status is RunStatus.FAILED
    assert _event_types(transition) == [RunEventType.LEASE_EXPIRED, RunEventType.FAILED]


@pytest.mark.parametrize(
    "outcome",
    [Succeeded("done"), Failed(BOOM), Failed(FATAL), Released(5.0, None)],
    ids=["succeeded", "retryable", "fatal", "released"],
)
def test_once_cancellation_is_requested_any_outcome_ends_the_run_cancelled(
    outcome: object,
) -> None:
    run = _run(RunStatus.CANCELLATION_REQUESTED, cancel_reason="operator")
    transition = _settle(run, outcome)
    assert transition.changes.status is RunStatus.CANCELLED
    assert transition.changes.cancel_reason == "operator"
    assert transition.changes.add_failure is False
    assert _event_types(transition) == [RunEventType.CANCELLED]
    assert transition.events[0].data == {"reason": "operator", "attempt": 1}


def test_a_cancellation_whose_worker_vanished_ends_cancelled_after_the_lease_expires() -> None:
    run = _run(RunStatus.CANCELLATION_REQUESTED, cancel_reason=None)
    transition = _settle(run, LeaseExpired())
    assert transition.changes.status is RunStatus.CANCELLED
    assert _event_types(transition) == [RunEventType.LEASE_EXPIRED, RunEventType.CANCELLED]
    assert transition.lease_expired_by == NOW


# -- request_cancellation --------------------------------------------------------------


@pytest.mark.parametrize("status", sorted(CLAIMABLE_STATUSES))
def test_cancelling_a_run_that_holds_no_lease_cancels_it_at_once(status: RunStatus) -> None:
    transition = request_cancellation(_run(status), "not needed")
    assert transition is not None
    assert transition.changes.status is RunStatus.CANCELLED
    assert transition.changes.cancel_reason == "not needed"
    assert _event_types(transition) == [RunEventType.CANCELLED]
    assert transition.events[0].data == {"reason": "not needed"}
    assert transition.lease_token is None
    assert transition.expected_sequence == 2


def test_cancelling_a_waiting_retry_keeps_its_last_failure() -> None:
    transition = request_cancellation(_run(RunStatus.RETRYING, failure=BOOM), None)
    assert transition is not None
    assert transition.changes.failure == BOOM


def test_cancelling_a_running_run_asks_its_worker_to_stop_and_keeps_the_lease() -> None:
    transition = request_cancellation(_run(RunStatus.RUNNING), "operator")
    assert transition is not None
    assert transition.changes.status is RunStatus.CANCELLATION_REQUESTED
    assert transition.changes.keep_lease is True
    assert transition.changes.cancel_reason == "operator"
    assert _event_types(transition) == [RunEventType.CANCELLATION_REQUESTED]


def test_cancelling_twice_changes_nothing_the_second_time() -> None:
    assert request_cancellation(_run(RunStatus.CANCELLATION_REQUESTED), "again") is None


@pytest.mark.parametrize("status", sorted(TERMINAL_STATUSES))
def test_a_finished_run_cannot_be_cancelled(status: RunStatus) -> None:
    with pytest.raises(RunlaneError) as caught:
        request_cancellation(_run(status), None)
    assert caught.value.code is ErrorCode.INVALID_STATE
    assert caught.value.meta == {"run_id": "run-1", "status": status.value}


def test_a_dead_lettered_delivery_cannot_be_cancelled() -> None:
    with pytest.raises(RunlaneError) as caught:
        request_cancellation(_run(RunStatus.DEAD_LETTERED), None)
    assert caught.value.code is ErrorCode.INVALID_STATE
    assert "rl.dead_letters" in caught.value.message
    assert caught.value.meta == {"run_id": "run-1", "status": "dead_lettered"}


def test_every_status_is_covered_by_the_cancellation_rules() -> None:
    covered = CLAIMABLE_STATUSES | TERMINAL_STATUSES
    covered |= {RunStatus.RUNNING, RunStatus.CANCELLATION_REQUESTED, RunStatus.DEAD_LETTERED}
    covered |= {RunStatus.WAITING}
    assert covered == set(RunStatus)


# -- sanitize_exception ----------------------------------------------------------------


def test_a_runlane_error_keeps_its_code_message_retryability_and_meta() -> None:
    error = RunlaneError(
        ErrorCode.TRANSPORT_UNAVAILABLE, "SQS is down", meta={"region": "eu"}, retryable=True
    )
    assert sanitize_exception(error) == RunFailure(
        code="transport_unavailable", message="SQS is down", retryable=True, meta={"region": "eu"}
    )


def test_a_non_retryable_runlane_error_stays_non_retryable() -> None:
    failure = sanitize_exception(RunlaneError(ErrorCode.TASK_FAILED, "Upstream refused"))
    assert failure.retryable is False


def test_any_other_exception_becomes_a_retryable_task_failure_without_its_text() -> None:
    failure = sanitize_exception(ValueError("password=hunter2"))
    assert failure.code == "task_failed"
    assert failure.message == "Task raised ValueError."
    assert "hunter2" not in failure.message
    assert failure.retryable is True
    assert failure.meta["exception_type"] == "ValueError"
    assert failure.meta["detail"] == "password=hunter2"


def test_a_long_exception_text_is_cut_short() -> None:
    failure = sanitize_exception(RuntimeError("x" * 10_000))
    assert len(failure.meta["detail"]) == 2000


def test_the_exception_type_is_recorded_by_its_qualified_name() -> None:
    class Outer:
        class Problem(Exception):
            pass

    failure = sanitize_exception(Outer.Problem())
    assert failure.meta["exception_type"].endswith("Outer.Problem")
    assert failure.message == "Task raised Problem."


def test_a_failure_round_trips_through_its_storage_form() -> None:
    failure = sanitize_exception(KeyError("k"))
    assert RunFailure.from_json(failure.to_json()) == failure


@pytest.mark.parametrize(
    "outcome", [Succeeded({"n": 1}), Failed(BOOM), Failed(FATAL), Released(30.0, "later")]
)
def test_project_changes_exactly_what_the_transition_writes(outcome: object) -> None:
    run = _run(
        idempotency_key="key",
        singleton_key="one",
        concurrency_key="tenant",
        trace_carrier={"traceparent": "00-x"},
    )
    transition = settle_attempt(run, outcome, NO_JITTER, NOW)  # type: ignore[arg-type]
    changes = transition.changes
    expected = dataclasses.replace(
        run,
        status=changes.status,
        run_at=changes.run_at or run.run_at,
        result=changes.result,
        failure=changes.failure,
        cancel_reason=changes.cancel_reason,
        failure_count=run.failure_count + int(changes.add_failure),
        event_sequence=run.event_sequence + len(transition.events),
        updated_at=NOW,
        lease=None,
    )
    assert project(run, transition, NOW) == expected
    waiting = request_cancellation(run, "stop")
    assert waiting is not None
    assert project(run, waiting, NOW).lease == run.lease


def test_cancelling_a_waiting_run_cancels_it_at_once() -> None:
    transition = request_cancellation(_run(RunStatus.WAITING, lease=None), "not needed")
    assert transition is not None
    assert transition.changes.status is RunStatus.CANCELLED
    assert not transition.changes.keep_lease
