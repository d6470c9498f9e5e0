"""What ``ctx.progress`` accepts: the checks of ``runlane.model.progress`` at their edges."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from runlane import ErrorCode, RunlaneError
from runlane.model.progress import (
    MAX_PROGRESS_DATA_BYTES,
    MAX_PROGRESS_MESSAGE_CHARS,
    check_progress,
)


@pytest.mark.parametrize("fraction", [0, 0.0, 1, 1.0, 0.5, 1e-300])
def test_fractions_from_zero_to_one_inclusive_are_accepted_as_floats(fraction: Any) -> None:
    report = check_progress(fraction)
    assert report.fraction == float(fraction) and isinstance(report.fraction, float)
    assert (report.message, report.data_json) == (None, None)


@pytest.mark.parametrize("fraction", [-1e-9, 1.0000001, math.inf, -math.inf, math.nan])
def test_fractions_outside_zero_to_one_or_not_finite_are_refused(fraction: float) -> None:
    with pytest.raises(RunlaneError) as raised:
        check_progress(fraction)
    assert raised.value.code is ErrorCode.CONFIGURATION_INVALID


@pytest.mark.parametrize("fraction", [None, "0.5", True, [0.5], {"f": 0.5}])
def test_fractions_that_are_not_numbers_are_refused(fraction: Any) -> None:
    with pytest.raises(RunlaneError) as raised:
        check_progress(fraction)
    assert raised.value.code is ErrorCode.CONFIGURATION_INVALID


def test_a_message_of_500_characters_is_kept_and_501_is_refused() -> None:
    longest = "é" * MAX_PROGRESS_MESSAGE_CHARS
    assert check_progress(0.5, longest).message == longest
    with pytest.raises(RunlaneError) as raised:
        check_progress(0.5, longest + "x")
    assert raised.value.code is ErrorCode.CONFIGURATION_INVALID
    for unstorable in ("nul \x00 inside", "lone \ud800 surrogate"):
        with pytest.raises(RunlaneError):
            check_progress(0.5, unstorable)


def test_data_is_bounded_by_the_size_of_its_json_text() -> None:
    # {"b":"..."} is 8 bytes around the string.
    fits = {"b": "x" * (MAX_PROGRESS_DATA_BYTES - 8)}
    report = check_progress(0.5, data=fits)
    assert report.data_json is not None and len(report.data_json.encode()) == 8192
    assert json.loads(report.data_json) == fits
    with pytest.raises(RunlaneError) as raised:
        check_progress(0.5, data={"b": "x" * (MAX_PROGRESS_DATA_BYTES - 7)})
    assert raised.value.code is ErrorCode.CONFIGURATION_INVALID
    assert raised.value.meta["size"] == 8193


@pytest.mark.parametrize(
    "data", [{"nan": math.nan}, [math.inf], {1, 2}, object(), {"k": b"bytes"}, {"\x00": 1}]
)
def test_data_that_is_not_storable_json_is_refused(data: Any) -> None:
    with pytest.raises(RunlaneError) as raised:
        check_progress(0.5, data=data)
    assert raised.value.code is ErrorCode.CONFIGURATION_INVALID


def test_json_data_of_every_kind_is_kept_as_compact_text() -> None:
    data = {"page": 42, "ratio": 0.5, "names": ["a", "é"], "done": False, "none": None}
    report = check_progress(0.42, "page 42", data)
    assert report.data_json == json.dumps(data, separators=(",", ":"), ensure_ascii=False)
    assert check_progress(0.1, data="just text").data_json == '"just text"'
