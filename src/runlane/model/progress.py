"""What a task may report as its progress (``ctx.progress``): the checks, decided once.

A report is a fraction in [0, 1], an optional message and optional JSON data. Bad
values raise ``CONFIGURATION_INVALID`` in the handler that passed them (the attempt
then fails like on any exception); nothing is stored.
"""

from __future__ import annotations

import json
import math
from typing import Any, NamedTuple

from runlane.types.errors import configuration_error
from runlane.types.storable_text import NUL, unstorable, unstorable_json, utf8_size

#: The longest message a report may carry, in characters.
MAX_PROGRESS_MESSAGE_CHARS = 500
#: The largest ``data`` a report may carry, as compact JSON text in UTF-8 bytes.
MAX_PROGRESS_DATA_BYTES = 8 * 1024

_encode = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode


class ProgressReport(NamedTuple):
    """One checked report: what storage keeps of it."""

    fraction: float
    message: str | None
    #: The compact JSON text of ``data`` (``None`` when the task passed none).
    data_json: str | None


#: Builds a :class:`ProgressReport` from a tuple of its fields, skipping the named
#: tuple's Python-level ``__new__``: a report is built per ``ctx.progress`` call, and
#: that ``__new__`` (or a frozen dataclass's ``__init__``) cost more than the checks
#: themselves (callgrind: about 3,400 instructions of a 5,400-instruction check).
_new_tuple = tuple.__new__


def check_progress(fraction: object, message: object = None, data: Any = None) -> ProgressReport:
    """The report ``ctx.progress(fraction, message=, data=)`` stands for, or
    ``CONFIGURATION_INVALID`` saying what is wrong with it.

    >>> check_progress(0.42, message="page 42 of 100").fraction
    0.42
    """
    # The usual report, checked in a few comparisons: tasks may report in tight loops.
    # (A NaN fails the range test and takes the long way, which refuses it.)
    if (
        type(fraction) is float
        and 0.0 <= fraction <= 1.0
        and data is None
        and (
            message is None
            or (
                type(message) is str
                and len(message) <= MAX_PROGRESS_MESSAGE_CHARS
                and message.isascii()
                and NUL not in message
            )
        )
    ):
        return _new_tuple(ProgressReport, (fraction, message, None))
    if isinstance(fraction, bool) or not isinstance(fraction, int | float):
        raise configuration_error(
            f"progress fraction must be a number in [0, 1], not {type(fraction).__name__}."
        )
    value = float(fraction)
    if math.isnan(value) or not 0.0 <= value <= 1.0:
        raise configuration_error(f"progress fraction must be in [0, 1], not {fraction!r}.")
    if message is not None:
        if not isinstance(message, str):
            raise configuration_error(
                f"progress message must be a string, not {type(message).__name__}."
            )
        if len(message) > MAX_PROGRESS_MESSAGE_CHARS:
            raise configuration_error(
                f"progress message is {len(message)} characters; at most "
                f"{MAX_PROGRESS_MESSAGE_CHARS} are kept.",
                length=len(message),
            )
        problem = unstorable(message)
        if problem is not None:
            raise configuration_error(f"progress message must not contain {problem}.")
    data_json = None if data is None else _data_json(data)
    return _new_tuple(ProgressReport, (value, message, data_json))


def _data_json(data: Any) -> str:
    try:
        encoded = _encode(data)
    except (TypeError, ValueError, RecursionError) as error:
        # ValueError: NaN or an infinity (allow_nan=False), or a cycle.
        raise configuration_error(
            f"progress data must be JSON (dicts, lists, strings, finite numbers, "
            f"booleans, None): {error}"
        ) from None
    size = utf8_size(encoded)
    if size is not None and size > MAX_PROGRESS_DATA_BYTES:
        raise configuration_error(
            f"progress data is {size} bytes of JSON; at most {MAX_PROGRESS_DATA_BYTES} are kept.",
            size=size,
        )
    problem = unstorable_json(data, encoded)
    if problem is not None:
        raise configuration_error(f"progress data must not contain {problem}.")
    return encoded
