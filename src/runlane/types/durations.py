"""Duration parsing: ``"500ms"``, ``"30s"``, ``"2m"``, ``"1h"``, ``"1d"``, timedelta or seconds."""

from __future__ import annotations

import math
import re
from datetime import timedelta

from runlane.types.errors import configuration_error

Duration = str | timedelta | int | float
"""Anything accepted where the API asks for a duration."""

#: Longer durations are certainly mistakes (and overflow datetime arithmetic).
MAX_DURATION_SECONDS = 100 * 365 * 86400.0

_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_PATTERN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)\s*$")


def parse_duration(value: object, *, name: str = "duration", allow_zero: bool = True) -> float:
    """Return ``value`` as seconds, or raise ``CONFIGURATION_INVALID``.

    >>> parse_duration("2m")
    120.0
    """
    seconds: float
    if isinstance(value, bool):
        raise configuration_error(f"{name} must be a duration such as '30s', got a boolean.")
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, int | float):
        try:
            seconds = float(value)
        except OverflowError:
            seconds = math.inf
    elif isinstance(value, str):
        match = _PATTERN.match(value)
        if match is None:
            raise configuration_error(
                f"{name} {value!r} is not a duration; use a number with ms, s, m, h or d "
                "(for example '500ms', '30s', '2m'), a timedelta, or seconds as a number."
            )
        seconds = float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
    else:
        raise configuration_error(
            f"{name} must be a duration string, timedelta or number, got {type(value).__name__}."
        )
    if math.isnan(seconds) or math.isinf(seconds) or seconds < 0:
        raise configuration_error(f"{name} must be a finite, non-negative duration, got {value!r}.")
    if seconds > MAX_DURATION_SECONDS:
        raise configuration_error(f"{name} {value!r} is longer than 100 years.")
    if seconds == 0 and not allow_zero:
        raise configuration_error(f"{name} must be longer than zero.")
    return seconds


def parse_optional_duration(
    value: object | None, *, name: str, allow_zero: bool = True
) -> float | None:
    """Like :func:`parse_duration` but passes ``None`` through."""
    if value is None:
        return None
    return parse_duration(value, name=name, allow_zero=allow_zero)
