"""Click parameter types and shared options for every command.

Types are plain functions: click reports the ``ValueError`` they raise as an
"Invalid value" usage error naming the option.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

import click

from runlane import RunlaneError, RunStatus
from runlane.model.payloads import MAX_PAYLOAD_DEPTH
from runlane.operator import parse_duration

F = TypeVar("F", bound=Callable[..., Any])


def duration(value: str | float) -> float:
    """``500ms``, ``30s``, ``2m``, ``1h``, ``1d`` or plain seconds, as float seconds."""
    try:
        seconds: str | float = float(value)
    except ValueError:
        seconds = value
    try:
        return parse_duration(seconds, name="duration")
    except RunlaneError as error:
        raise ValueError(error.message) from None


def json_document(value: Any) -> Any:
    """A JSON document given on the command line (``--payload '{"to": "a@b.c"}'``)."""
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError as error:
        raise ValueError(f"not valid JSON ({error.msg} at position {error.pos}).") from None
    except RecursionError:
        raise ValueError(
            f"nested too deeply (payloads may nest at most {MAX_PAYLOAD_DEPTH} levels)."
        ) from None


STATUS = click.Choice([status.value for status in RunStatus], case_sensitive=False)


#: ``ctx.meta`` key that tells the error handler a command was asked for JSON.
JSON_REQUESTED = "runlane.json"


def _remember_json(ctx: click.Context, param: click.Parameter, value: bool) -> bool:
    if value:
        ctx.meta[JSON_REQUESTED] = True  # meta is shared by every context of one invocation
    return value


def json_option(fn: F) -> F:
    """``--json``: print machine-readable JSON instead of tables (errors too)."""
    return click.option(
        "--json",
        "as_json",
        is_flag=True,
        callback=_remember_json,
        help="Print JSON instead of a table.",
    )(fn)
