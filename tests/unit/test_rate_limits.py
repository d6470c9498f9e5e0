"""Rate limits as values (parsing, validation) and their token arithmetic (GCRA)."""

from __future__ import annotations

from typing import Any

import pytest

from runlane import ErrorCode, RateLimit, RunlaneError, queue
from runlane.model.rate_limiting import next_token_at, tat_after, tokens_available
from runlane.types.rate_limits import parse_rate_limit

SECOND = 1_000_000


@pytest.mark.parametrize(
    ("text", "count", "per"),
    [("10/s", 10, 1.0), ("100/m", 100, 60.0), ("5/h", 5, 3600.0), ("1/d", 1, 86400.0)],
)
def test_the_short_forms_name_a_count_per_unit(text: str, count: int, per: float) -> None:
    assert parse_rate_limit(text) == RateLimit(count, per=per)


@pytest.mark.parametrize(
    "bad",
    ["10/x", "0/s", "-1/s", "10", "/s", "ten/s", 10, 1.5, ["10/s"]],
)
def test_a_malformed_rate_is_a_configuration_error(bad: Any) -> None:
    with pytest.raises(RunlaneError) as raised:
        queue("limited", rate_limit=bad)
    assert raised.value.code is ErrorCode.CONFIGURATION_INVALID


@pytest.mark.parametrize(
    "arguments",
    [
        {"count": 10, "per": "500ms"},
        {"count": 10, "per": "2d"},
        {"count": 10, "per": "1s", "burst": 11},
        {"count": 10, "per": "1s", "burst": 0},
        {"count": 0, "per": "1s"},
        {"count": True, "per": "1s"},
        {"count": 10, "per": "soon"},
    ],
)
def test_a_rate_limit_out_of_bounds_is_a_configuration_error(arguments: dict[str, Any]) -> None:
    with pytest.raises(RunlaneError) as raised:
        RateLimit(**arguments)
    assert raised.value.code is ErrorCode.CONFIGURATION_INVALID


def test_rate_limit_by_is_key_or_nothing_and_needs_a_rate_limit() -> None:
    for options in ({"rate_limit": "1/s", "rate_limit_by": "tenant"}, {"rate_limit_by": "key"}):
        with pytest.raises(RunlaneError) as raised:
            queue("limited", **options)
        assert raised.value.code is ErrorCode.CONFIGURATION_INVALID


def test_two_definitions_with_different_rate_limits_differ() -> None:
    assert queue("q", rate_limit="10/s") == queue("q", rate_limit=RateLimit(10, per="1s"))
    assert queue("q", rate_limit="10/s") != queue("q", rate_limit="10/m")


def test_an_idle_partition_has_its_whole_burst_then_one_token_per_interval() -> None:
    limit = RateLimit(4, per="1s", burst=2)  # one token every 250 ms
    now = 100 * SECOND
    assert tokens_available(limit, None, now) == 2
    tat = tat_after(limit, None, now, 2)
    assert tat == now + SECOND // 2
    assert tokens_available(limit, tat, now) == 0
    assert next_token_at(limit, tat, now) == now + SECOND // 4
    assert tokens_available(limit, tat, now + SECOND // 4 - 1) == 0
    assert tokens_available(limit, tat, now + SECOND // 4) == 1
    # Long idle never banks more than the burst.
    assert tokens_available(limit, tat, now + 3600 * SECOND) == 2


def test_any_window_of_the_period_holds_at_most_count_plus_burst_minus_one_starts() -> None:
    limit = RateLimit(5, per="1s", burst=3)
    starts: list[int] = []
    tat: int | None = None
    for step in range(0, 10 * SECOND, SECOND // 100):  # greedy claims every 10 ms
        taken = tokens_available(limit, tat, step)
        if taken:
            tat = tat_after(limit, tat, step, taken)
            starts += [step] * taken
    for index, start in enumerate(starts):
        in_window = [t for t in starts[index:] if t - start < SECOND]
        assert len(in_window) <= limit.count + limit.burst - 1
    assert len(starts) >= 5 * 9  # and it keeps the rate
