"""What a task handler's end means for its run: the checks and the stored failure.

A returned value becomes a :class:`Succeeded` result only if every process can
store and read it back (JSON, storable text, nesting within the payloads' cap);
otherwise the attempt fails instead of the whole batch of settles. A raised
exception becomes a :class:`Failed` outcome carrying its formatted traceback.
:data:`TASK_ENDS` hands these to :func:`runlane.model.handler_calls.call_handler`.
"""

from __future__ import annotations

import json
import traceback
from typing import Any

from runlane.model.context import Release
from runlane.model.handler_calls import HandlerEnds
from runlane.model.payloads import MAX_PAYLOAD_DEPTH
from runlane.model.transitions import (
    AttemptOutcome,
    Failed,
    Released,
    Succeeded,
    sanitize_exception,
)
from runlane.types.durations import parse_duration
from runlane.types.errors import ErrorCode, RunlaneError
from runlane.types.runs import Run, RunFailure
from runlane.types.storable_text import storable, unstorable, unstorable_json

#: Results obey the payloads' nesting cap: readers decode them recursively, so a deeper
#: one would fail where it is read (in any process), not where it was made.
MAX_RESULT_DEPTH = MAX_PAYLOAD_DEPTH
#: A failed attempt keeps at most this many characters of its formatted traceback
#: (the innermost frames and the exception line, where the cause usually is).
MAX_TRACEBACK_CHARS = 8192


#: The outcome of a handler that returned nothing (immutable, so one for all).
RETURNED_NOTHING = Succeeded(None)


def result_outcome(run: Run, value: Any) -> AttemptOutcome:
    """What a handler's return value means: a release, or a JSON result."""
    if value is None:
        return RETURNED_NOTHING
    if isinstance(value, Release):
        try:
            delay = parse_duration(value.delay, name="the Release delay")
            reason = storable(str(value.reason)) if value.reason is not None else None
        except Exception as error:
            # Settling would raise (a NaN or overflowing delay, a reason that cannot
            # be printed): fail this attempt instead of leaving the run leased.
            return Failed(
                RunFailure(
                    ErrorCode.TASK_FAILED.value,
                    f"Task {run.task_id!r} returned a Release that cannot be honoured: "
                    f"{error.message if isinstance(error, RunlaneError) else 'bad reason'}.",
                    retryable=False,
                )
            )
        return Released(delay, reason)
    if isinstance(value, bool | int):
        return Succeeded(value)
    if isinstance(value, str):
        problem = unstorable(value)
        return Succeeded(value) if problem is None else _unstorable(run, problem)
    try:
        encoded = json.dumps(value, allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        return Failed(
            RunFailure(
                ErrorCode.TASK_FAILED.value,
                f"Task {run.task_id!r} returned a {type(value).__name__}, which is not JSON "
                f"(or is nested too deep to encode).",
                retryable=False,
            )
        )
    # Counting brackets is cheap and rules out deep nesting for almost every result.
    if (
        encoded.count("[") + encoded.count("{") > MAX_RESULT_DEPTH
        and _depth(value) > MAX_RESULT_DEPTH
    ):
        return _unstorable(run, f"more than {MAX_RESULT_DEPTH} levels of nesting")
    problem = unstorable_json(value, encoded)
    return Succeeded(value) if problem is None else _unstorable(run, problem)


def raised_failure(run: Run, error: BaseException) -> Failed:
    """What a handler's exception means: the attempt failed, with its traceback."""
    failure = sanitize_exception(error)
    text = format_traceback(error)
    if text is not None:
        failure = RunFailure(
            failure.code,
            failure.message,
            failure.retryable,
            {**failure.meta, "traceback": text},
        )
    return Failed(failure, error)


def timed_out_failure(run: Run, time_limit: float) -> Failed:
    """The attempt ran past its time limit (``time_limit`` seconds) and was stopped."""
    return Failed(
        RunFailure(
            ErrorCode.TASK_TIMEOUT.value, time_limit_message(run, time_limit), retryable=True
        )
    )


def time_limit_message(run: Run, time_limit: float) -> str:
    """What a run's attempt stopped at its time limit (``time_limit`` seconds) says."""
    return f"Task {run.task_id!r} ran longer than its {time_limit:g}s time limit."


#: What a task handler's end means for the run it was called for.
TASK_ENDS: HandlerEnds[Run, AttemptOutcome] = HandlerEnds(
    returned=result_outcome, raised=raised_failure, timed_out=timed_out_failure
)


def describe_delivery_failure(error: BaseException) -> RunFailure:
    """A delivery handler's exception as stored: as a task's, with its traceback
    when it was raised (an error made by the runtime itself has none)."""
    failure = sanitize_exception(error)
    if error.__traceback__ is None:
        return failure
    text = format_traceback(error)
    if text is None:
        return failure
    return RunFailure(
        failure.code, failure.message, failure.retryable, {**failure.meta, "traceback": text}
    )


def format_traceback(error: BaseException, limit: int = MAX_TRACEBACK_CHARS) -> str | None:
    """``error``'s formatted traceback, cut to its last ``limit`` characters (the
    innermost frames), storable as text; ``None`` if it cannot be formatted."""
    try:
        text = "".join(traceback.format_exception(error))
    except Exception:
        return None  # task code's __str__ may raise: the failure still stores
    if len(text) > limit:
        cut = text[-limit:]
        # Start at a line boundary so the first frame kept reads whole.
        newline = cut.find("\n")
        text = "… (traceback truncated)\n" + (cut[newline + 1 :] if newline >= 0 else cut)
    return storable(text)


def _depth(value: Any) -> int:
    """How deeply lists and dicts nest in ``value`` (without recursion)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            item = item.values()
        elif not isinstance(item, list | tuple):
            continue
        deepest = max(deepest, level)
        stack.extend((child, level + 1) for child in item)
    return deepest


def _unstorable(run: Run, problem: str) -> Failed:
    # Failing only this run: stored, the result would fail the whole batch of settles.
    return Failed(
        RunFailure(
            ErrorCode.TASK_FAILED.value,
            f"Task {run.task_id!r} returned a result containing {problem}.",
            retryable=False,
        )
    )
