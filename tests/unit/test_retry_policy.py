"""RetryPolicy: eager validation, exponential and fixed backoff, jitter, the attempt budget."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runlane import BackoffType, ErrorCode, RetryPolicy, RunlaneError
from runlane.types.retry import DEFAULT_RETRY_POLICY


def _no_jitter(**options: object) -> RetryPolicy:
    return RetryPolicy(jitter=False, **options)  # type: ignore[arg-type]


def test_the_default_policy_is_three_attempts_from_one_second_to_five_minutes() -> None:
    assert DEFAULT_RETRY_POLICY.max_attempts == 3
    assert DEFAULT_RETRY_POLICY.initial_delay == 1.0
    assert DEFAULT_RETRY_POLICY.max_delay == 300.0
    assert DEFAULT_RETRY_POLICY.backoff is BackoffType.EXPONENTIAL
    assert DEFAULT_RETRY_POLICY.jitter is True


def test_durations_are_parsed_at_construction() -> None:
    policy = RetryPolicy(max_attempts=5, initial_delay="500ms", max_delay="2m", backoff="fixed")
    assert (policy.initial_delay, policy.max_delay) == (0.5, 120.0)
    assert policy.backoff is BackoffType.FIXED


@pytest.mark.parametrize(
    "options",
    [
        {"max_attempts": 0},
        {"max_attempts": -1},
        {"max_attempts": True},
        {"max_attempts": 2.0},
        {"max_attempts": "3"},
        {"initial_delay": "soon"},
        {"initial_delay": "-1s"},
        {"max_delay": None},
        {"initial_delay": "10s", "max_delay": "5s"},
        {"backoff": "linear"},
    ],
    ids=repr,
)
def test_bad_options_raise_at_construction(options: dict[str, object]) -> None:
    with pytest.raises(RunlaneError) as caught:
        RetryPolicy(**options)  # type: ignore[arg-type]
    assert caught.value.code is ErrorCode.CONFIGURATION_INVALID


def test_exponential_backoff_doubles_from_the_initial_delay_until_capped() -> None:
    policy = _no_jitter(max_attempts=10, initial_delay="1s", max_delay="10s")
    delays = [policy.delay_after(failures) for failures in range(1, 8)]
    assert delays == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0, 10.0]


def test_exponential_backoff_stays_capped_after_very_many_failures() -> None:
    policy = _no_jitter(max_attempts=10_000, initial_delay="1s", max_delay="1h")
    assert policy.delay_after(5_000) == 3600.0


def test_fixed_backoff_waits_the_initial_delay_every_time() -> None:
    policy = _no_jitter(max_attempts=10, initial_delay="3s", max_delay="1m", backoff="fixed")
    assert [policy.delay_after(failures) for failures in range(1, 6)] == [3.0] * 5


def test_a_zero_delay_policy_retries_at_once_even_with_jitter() -> None:
    policy = RetryPolicy(max_attempts=3, initial_delay="0s", max_delay="0s")
    assert policy.delay_after(1) == 0.0
    assert policy.delay_after(2) == 0.0


def test_jitter_draws_each_delay_from_the_upper_half() -> None:
    policy = RetryPolicy(max_attempts=10, initial_delay="4s", max_delay="1m")
    rng = random.Random(7)
    draws = [policy.delay_after(2, rng) for _ in range(500)]
    assert all(4.0 <= draw <= 8.0 for draw in draws)
    # Spread out, not pinned to one end: runs that failed together do not retry together.
    assert min(draws) < 5.0 < 7.0 < max(draws)


def test_jitter_is_reproducible_with_a_seeded_random() -> None:
    policy = RetryPolicy(max_attempts=5)
    assert policy.delay_after(3, random.Random(1)) == policy.delay_after(3, random.Random(1))


@pytest.mark.parametrize(
    ("failures", "may_retry"), [(0, True), (1, True), (2, True), (3, False), (4, False)]
)
def test_the_budget_counts_the_first_attempt(failures: int, may_retry: bool) -> None:
    assert RetryPolicy(max_attempts=3).has_budget(failures) is may_retry


def test_a_single_attempt_policy_never_retries() -> None:
    assert RetryPolicy(max_attempts=1).has_budget(1) is False


@given(
    initial=st.floats(min_value=0, max_value=3600),
    extra=st.floats(min_value=0, max_value=86_400),
    failures=st.integers(min_value=1, max_value=200),
    backoff=st.sampled_from(list(BackoffType)),
    jitter=st.booleans(),
    seed=st.integers(min_value=0, max_value=2**32),
)
def test_retry_delays_never_exceed_max_delay_nor_fall_below_zero(
    initial: float, extra: float, failures: int, backoff: BackoffType, jitter: bool, seed: int
) -> None:
    policy = RetryPolicy(
        max_attempts=1000,
        initial_delay=initial,
        max_delay=initial + extra,
        backoff=backoff,
        jitter=jitter,
    )
    delay = policy.delay_after(failures, random.Random(seed))
    assert 0 <= delay <= policy.max_delay


@given(
    initial=st.floats(min_value=0.001, max_value=60),
    failures=st.integers(min_value=1, max_value=60),
)
def test_without_jitter_exponential_delays_never_shrink(initial: float, failures: int) -> None:
    policy = _no_jitter(max_attempts=1000, initial_delay=initial, max_delay="1d")
    assert policy.delay_after(failures + 1) >= policy.delay_after(failures)


def test_a_policy_is_an_immutable_value() -> None:
    policy = RetryPolicy(max_attempts=2)
    with pytest.raises(AttributeError):
        policy.max_attempts = 5  # type: ignore[misc]
    assert policy == RetryPolicy(max_attempts=2)
