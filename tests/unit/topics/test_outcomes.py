"""Contract 5.5.1: outcomes, work errors, and where an attempt's end takes a delivery."""

from __future__ import annotations

import random
from typing import Any

import pytest

from runlane import ErrorCode, RetryPolicy, RunlaneError
from runlane.model.context import Release
from runlane.topics.outcomes import (
    Complete,
    DeadLetterReason,
    DeadLetterWith,
    FatalWorkError,
    Outcome,
    OutcomeKind,
    ReleaseFor,
    RetryAfter,
    TransientWorkError,
    dead_letter_reason,
    decide_delivery,
)
from runlane.types.runs import RunFailure

#: Three attempts, 10 s doubling, no jitter: delays are exact.
POLICY = RetryPolicy(max_attempts=3, initial_delay="10s", max_delay="1m", jitter=False)


def _returned(value: Any, failures_so_far: int = 0) -> Any:
    return decide_delivery(value, raised=False, failures_so_far=failures_so_far, policy=POLICY)


def _raised(error: BaseException, failures_so_far: int = 0) -> Any:
    return decide_delivery(error, raised=True, failures_so_far=failures_so_far, policy=POLICY)


# --- building outcomes ---


def test_outcomes_carry_their_kind_reason_and_delay() -> None:
    assert Outcome.complete() == Outcome(OutcomeKind.COMPLETE)
    assert Outcome.retry() == Outcome(OutcomeKind.RETRY, None, None)
    assert Outcome.retry("busy", delay="2m") == Outcome(OutcomeKind.RETRY, "busy", 120.0)
    assert Outcome.dead_letter("poison") == Outcome(OutcomeKind.DEAD_LETTER, "poison", None)


@pytest.mark.parametrize(
    "build",
    [
        lambda: Outcome.dead_letter(""),
        lambda: Outcome.dead_letter("   "),
        lambda: Outcome.dead_letter(None),  # type: ignore[arg-type]
        lambda: Outcome.dead_letter("nul\x00"),
        lambda: Outcome.retry(""),
        lambda: Outcome.retry(delay="soon"),
        lambda: Outcome.retry(delay=-1),
        lambda: TransientWorkError("busy", retry_after="never"),
    ],
)
def test_a_bad_reason_or_delay_is_refused_where_the_outcome_is_built(build: Any) -> None:
    with pytest.raises(RunlaneError) as raised:
        build()
    assert raised.value.code is ErrorCode.CONFIGURATION_INVALID


def test_an_outcome_is_frozen() -> None:
    with pytest.raises(AttributeError):
        Outcome.complete().reason = "x"  # type: ignore[misc]


def test_transient_work_error_keeps_its_retry_after_in_seconds() -> None:
    assert TransientWorkError("busy", retry_after="30s").retry_after == 30.0
    assert TransientWorkError().retry_after is None


# --- the table of 5.5.1 ---


@pytest.mark.parametrize("failures_so_far", [0, 2, 10])
def test_none_or_complete_succeeds_whatever_the_budget(failures_so_far: int) -> None:
    assert _returned(None, failures_so_far) == Complete()
    assert _returned(Outcome.complete(), failures_so_far) == Complete()


def test_a_release_is_not_a_failure_and_spends_no_budget() -> None:
    assert _returned(Release(45.0, "later"), failures_so_far=2) == ReleaseFor(45.0, "later")


def test_outcome_retry_with_a_delay_retries_after_that_delay() -> None:
    decision = _returned(Outcome.retry("busy", delay="7s"))
    assert isinstance(decision, RetryAfter)
    assert decision.delay == 7.0
    assert decision.failure.message == "busy"
    assert decision.failure.retryable is True


def test_outcome_retry_without_a_delay_uses_the_backoff() -> None:
    assert _returned(Outcome.retry(), failures_so_far=0).delay == 10.0
    assert _returned(Outcome.retry(), failures_so_far=1).delay == 20.0


def test_transient_work_error_retries_after_retry_after_or_the_backoff() -> None:
    assert _raised(TransientWorkError("busy", retry_after="3s")).delay == 3.0
    assert _raised(TransientWorkError("busy")).delay == 10.0


def test_any_other_exception_is_transient_with_the_backoff() -> None:
    decision = _raised(ValueError("boom"), failures_so_far=1)
    assert isinstance(decision, RetryAfter)
    assert decision.delay == 20.0
    assert decision.failure.meta["exception_type"] == "ValueError"


def test_a_retryable_runlane_error_is_transient() -> None:
    error = RunlaneError(ErrorCode.TASK_NOT_FOUND, "unknown", retryable=True)
    decision = _raised(error)
    assert isinstance(decision, RetryAfter)
    assert decision.failure.code == "task_not_found"


def test_a_return_value_that_is_no_outcome_is_transient_and_says_what_to_return() -> None:
    decision = _returned({"done": True})
    assert isinstance(decision, RetryAfter)
    assert "return None, an Outcome or ctx.release" in decision.failure.message


@pytest.mark.parametrize(
    "ending",
    [
        (Outcome.retry("busy"), False),
        (Outcome.retry("busy", delay="1s"), False),
        (TransientWorkError("busy", retry_after="1s"), True),
        (ValueError("boom"), True),
        (RunlaneError(ErrorCode.TASK_TIMEOUT, "slow", retryable=True), True),
        ("not an outcome", False),
    ],
)
def test_when_the_budget_is_spent_a_transient_ending_dead_letters(ending: Any) -> None:
    value, raised = ending
    # Two failures so far; counting this one makes three, the policy's max_attempts.
    decision = decide_delivery(value, raised=raised, failures_so_far=2, policy=POLICY)
    assert isinstance(decision, DeadLetterWith)
    assert decision.reason == DeadLetterReason.MAX_ATTEMPTS_EXCEEDED.value
    assert decision.failure is not None


def test_the_last_attempt_with_budget_left_still_retries() -> None:
    assert isinstance(_raised(ValueError(), failures_so_far=1), RetryAfter)


def test_outcome_dead_letter_parks_at_once_with_its_reason_and_no_failure() -> None:
    assert _returned(Outcome.dead_letter("bad data"), failures_so_far=0) == DeadLetterWith(
        "bad data", None
    )


def test_fatal_work_error_dead_letters_at_once_with_its_message_as_reason() -> None:
    decision = _raised(FatalWorkError("unknown customer"))
    assert decision == DeadLetterWith(
        "unknown customer",
        RunFailure(
            code="task_failed",
            message="unknown customer",
            retryable=False,
            meta={"exception_type": "FatalWorkError"},
        ),
    )


def test_fatal_work_error_without_a_message_has_the_built_in_reason() -> None:
    assert _raised(FatalWorkError()).reason == "fatal_work_error"
    assert _raised(FatalWorkError("   ")).reason == "fatal_work_error"


def test_a_non_retryable_runlane_error_dead_letters_with_its_code_as_reason() -> None:
    decision = _raised(RunlaneError(ErrorCode.PAYLOAD_INVALID, "schema says no"))
    assert isinstance(decision, DeadLetterWith)
    assert decision.reason == "payload_invalid"
    assert decision.failure is not None and decision.failure.retryable is False


def test_the_runtime_may_describe_exceptions_with_its_own_sanitiser() -> None:
    described = RunFailure(code="task_failed", message="described", retryable=True)
    decision = decide_delivery(
        KeyError("k"), raised=True, failures_so_far=0, policy=POLICY, describe=lambda e: described
    )
    assert decision == RetryAfter(10.0, described)


def test_backoff_jitter_draws_from_the_given_random_source() -> None:
    jittered = RetryPolicy(max_attempts=3, initial_delay="10s", max_delay="1m")
    first = decide_delivery(
        ValueError(), raised=True, failures_so_far=0, policy=jittered, rng=random.Random(7)
    )
    again = decide_delivery(
        ValueError(), raised=True, failures_so_far=0, policy=jittered, rng=random.Random(7)
    )
    assert first == again
    assert 5.0 <= first.delay <= 10.0


def test_raised_needs_an_exception() -> None:
    with pytest.raises(TypeError):
        decide_delivery("oops", raised=True, failures_so_far=0, policy=POLICY)


# --- stored reasons ---


def test_reasons_are_stored_up_to_500_characters_ending_in_an_ellipsis() -> None:
    assert dead_letter_reason("x" * 500) == "x" * 500
    cut = dead_letter_reason("x" * 501)
    assert len(cut) == 500
    assert cut.endswith("…")


def test_nul_in_a_reason_is_replaced() -> None:
    assert "\x00" not in dead_letter_reason("a\x00b")


def test_a_long_fatal_message_is_cut_as_a_reason() -> None:
    decision = _raised(FatalWorkError("y" * 900))
    assert len(decision.reason) == 500
