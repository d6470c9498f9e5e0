"""Priorities' pure rules (SPEC-flow 7.2): validation, the offset a priority buys and
the claim order it gives, without a database."""

from __future__ import annotations

from typing import Any

import pytest

from runlane import ErrorCode, RunlaneError, queue, schedule
from runlane.types.priorities import (
    DEFAULT_PRIORITY_WINDOW,
    claim_horizon,
    priority_offset,
    validate_priority,
)

SECOND = 1_000_000


@pytest.mark.parametrize("bad", [11, -11, True, False, 1.0, "5", None])
def test_a_priority_is_a_whole_number_from_minus_ten_to_ten(bad: Any) -> None:
    with pytest.raises(RunlaneError) as error:
        validate_priority(bad)
    assert error.value.code is ErrorCode.CONFIGURATION_INVALID


def test_the_ends_of_the_range_are_priorities() -> None:
    assert [validate_priority(p) for p in (-10, 0, 10)] == [-10, 0, 10]


@pytest.mark.parametrize("bad", ["0s", "500ms", "2d", "soon", -60, True, [1]])
def test_a_bad_priority_window_is_configuration_invalid(bad: Any) -> None:
    with pytest.raises(RunlaneError) as error:
        queue("windowed", priority_window=bad)
    assert error.value.code is ErrorCode.CONFIGURATION_INVALID


def test_a_queue_without_a_window_gets_five_minutes() -> None:
    assert queue("plain").priority_window == DEFAULT_PRIORITY_WINDOW == 300.0
    assert queue("short", priority_window="30s").priority_window == 30.0


def test_queues_with_different_windows_are_different_policies() -> None:
    assert queue("q", priority_window="1m") != queue("q", priority_window="2m")
    assert queue("q", priority_window="5m") == queue("q")


def test_a_schedule_with_a_bad_priority_is_configuration_invalid() -> None:
    with pytest.raises(RunlaneError) as error:
        schedule("bad.priority", every="1m", priority=12)
    assert error.value.code is ErrorCode.CONFIGURATION_INVALID


def test_a_priority_moves_a_run_by_a_tenth_of_the_window_per_step() -> None:
    assert priority_offset(0, 300.0) == 0
    assert priority_offset(10, 300.0) == 300 * SECOND
    assert priority_offset(-10, 60.0) == -60 * SECOND
    assert priority_offset(3, 60.0) == 18 * SECOND


def test_every_due_runs_claim_time_is_within_the_horizon() -> None:
    now = 1_000 * SECOND
    window = 60.0
    # The latest claim time a due run can have: due now, at the lowest priority.
    assert now - priority_offset(-10, window) == claim_horizon(now, window)
    assert all(
        now - priority_offset(p, window) <= claim_horizon(now, window) for p in range(-10, 11)
    )


def test_starvation_is_bounded_by_two_windows() -> None:
    window = 60.0
    lowest_due_at = 0

    def claim_at(due: int, priority: int) -> int:
        return due - priority_offset(priority, window)

    within = 2 * 60 * SECOND - 1
    beyond = 2 * 60 * SECOND + 1
    assert claim_at(within, 10) < claim_at(lowest_due_at, -10)
    assert claim_at(beyond, 10) > claim_at(lowest_due_at, -10)
