"""Durations: every accepted form, and everything else rejected as bad configuration."""

from __future__ import annotations

import math
from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runlane import ErrorCode, RunlaneError
from runlane.types.durations import parse_duration, parse_optional_duration


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("500ms", 0.5),
        ("30s", 30.0),
        ("2m", 120.0),
        ("1h", 3600.0),
        ("1d", 86400.0),
        ("1.5s", 1.5),
        ("0s", 0.0),
        (" 30s ", 30.0),
        (timedelta(minutes=2), 120.0),
        (timedelta(milliseconds=250), 0.25),
        (45, 45.0),
        (0.25, 0.25),
        (0, 0.0),
    ],
)
def test_accepted_forms_parse_to_seconds(value: object, seconds: float) -> None:
    assert parse_duration(value) == seconds


@pytest.mark.parametrize(
    "value",
    [
        "",
        "   ",
        "5x",
        "30",
        "s",
        "-1s",
        "30S",
        "1e3s",
        "1h30m",
        -1,
        -0.001,
        timedelta(seconds=-1),
        math.nan,
        math.inf,
        -math.inf,
        True,
        False,
        None,
        [30],
        b"30s",
    ],
)
def test_anything_else_is_a_configuration_error(value: object) -> None:
    with pytest.raises(RunlaneError) as caught:
        parse_duration(value)
    assert caught.value.code is ErrorCode.CONFIGURATION_INVALID


def test_the_error_names_the_option_that_was_wrong() -> None:
    with pytest.raises(RunlaneError) as caught:
        parse_duration("soon", name="initial_delay")
    assert "initial_delay" in caught.value.message
    assert "'soon'" in caught.value.message


@pytest.mark.parametrize("zero", ["0s", "0ms", 0, 0.0, timedelta(0)])
def test_zero_is_rejected_where_a_positive_duration_is_required(zero: object) -> None:
    with pytest.raises(RunlaneError) as caught:
        parse_duration(zero, name="lease_duration", allow_zero=False)
    assert caught.value.code is ErrorCode.CONFIGURATION_INVALID


def test_an_optional_duration_passes_none_through_and_parses_the_rest() -> None:
    assert parse_optional_duration(None, name="timeout") is None
    assert parse_optional_duration("2m", name="timeout") == 120.0


def test_an_optional_duration_still_rejects_bad_values() -> None:
    with pytest.raises(RunlaneError) as caught:
        parse_optional_duration("later", name="timeout")
    assert caught.value.code is ErrorCode.CONFIGURATION_INVALID


def test_an_integer_too_large_for_a_float_is_a_configuration_error() -> None:
    with pytest.raises(RunlaneError) as caught:
        parse_duration(10**400)
    assert caught.value.code is ErrorCode.CONFIGURATION_INVALID


def test_a_duration_beyond_what_a_timedelta_can_hold_is_a_configuration_error() -> None:
    # Every duration is later added to a datetime; one that cannot even be a timedelta
    # would surface as a bare OverflowError deep inside trigger or settle.
    with pytest.raises(RunlaneError) as caught:
        parse_duration(1e300, name="max_delay")
    assert caught.value.code is ErrorCode.CONFIGURATION_INVALID


_UNITS = {"ms": timedelta(milliseconds=1), "s": timedelta(seconds=1), "m": timedelta(minutes=1)}
_UNITS |= {"h": timedelta(hours=1), "d": timedelta(days=1)}


@given(amount=st.integers(min_value=0, max_value=10_000), unit=st.sampled_from(sorted(_UNITS)))
def test_a_whole_number_with_a_unit_means_that_many_units(amount: int, unit: str) -> None:
    assert parse_duration(f"{amount}{unit}") == pytest.approx(
        (_UNITS[unit] * amount).total_seconds()
    )


@given(st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=3650)))
def test_a_timedelta_round_trips_through_seconds(value: timedelta) -> None:
    assert timedelta(seconds=parse_duration(value)) == value


@given(st.floats(min_value=0, max_value=1e9, allow_nan=False, allow_infinity=False))
def test_a_non_negative_number_is_taken_as_seconds(value: float) -> None:
    assert parse_duration(value) == value
