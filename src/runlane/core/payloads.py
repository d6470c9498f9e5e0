"""Payload validation and the size cap, applied before anything is written."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

from runlane.core.errors import ErrorCode, RunlaneError
from runlane.core.text import measure_json

if TYPE_CHECKING:
    from runlane.core.definitions import TaskDef

DEFAULT_MAX_PAYLOAD_BYTES = 256 * 1024
#: One encoder for every payload (``json.dumps`` with options builds one per call).
_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode


def prepare_payload(task: TaskDef[Any], payload: Any, max_bytes: int) -> tuple[Any, Any, str]:
    """Return ``(value for the handler, JSON value, its text)``: validated, capped, encoded.

    A schema-less payload is checked by encoding it, so it is serialised once.
    """
    if task.schema is not None:
        instance, value = validate_payload(task, payload)
        return instance, value, encode_payload(task.id, value, max_bytes)
    if isinstance(payload, BaseModel):
        payload = payload.model_dump(mode="json")
    try:
        encoded = _dumps(payload)
    except (TypeError, ValueError) as error:
        raise _not_json(task.id, error) from None
    _check_storable(task.id, payload, encoded, max_bytes)
    return payload, payload, encoded


def validate_payload(task: TaskDef[Any], payload: Any) -> tuple[Any, Any]:
    """Return ``(value for the handler, JSON value for storage)`` or raise PAYLOAD_INVALID."""
    schema = task.schema
    if schema is None:
        if isinstance(payload, BaseModel):
            payload = payload.model_dump(mode="json")
        _ensure_json(task, payload)
        return payload, payload
    try:
        if isinstance(payload, schema):
            instance = schema.model_validate(payload.model_dump())
        elif isinstance(payload, BaseModel):
            raise RunlaneError(
                ErrorCode.PAYLOAD_INVALID,
                f"task {task.id!r} expects {schema.__name__}, got {type(payload).__name__}.",
            )
        else:
            instance = schema.model_validate(payload)
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in issue['loc']) or '<root>'}: {issue['msg']}"
            for issue in error.errors()[:5]
        )
        raise RunlaneError(
            ErrorCode.PAYLOAD_INVALID,
            f"payload for task {task.id!r} is invalid: {problems}",
            meta={"errors": json.loads(error.json(include_url=False, include_input=False))},
        ) from None
    return instance, instance.model_dump(mode="json")


def encode_payload(task_id: str, value: Any, max_bytes: int) -> str:
    """Serialise a JSON payload, enforcing the size cap (PAYLOAD_TOO_LARGE)."""
    try:
        encoded = _dumps(value)
    except ValueError as error:
        raise RunlaneError(
            ErrorCode.PAYLOAD_INVALID,
            f"payload for task {task_id!r} is not strict JSON: {error}",
        ) from None
    _check_storable(task_id, value, encoded, max_bytes)
    return encoded


def _check_storable(task_id: str, value: Any, encoded: str, max_bytes: int) -> None:
    # One UTF-8 measurement for both checks (free for ASCII text).
    size, problem = measure_json(value, encoded)
    if problem is not None:
        raise RunlaneError(
            ErrorCode.PAYLOAD_INVALID,
            f"payload for task {task_id!r} contains {problem}; "
            "encode binary data (base64, for one) or drop it.",
        )
    if size > max_bytes:
        raise RunlaneError(
            ErrorCode.PAYLOAD_TOO_LARGE,
            f"payload for task {task_id!r} is {size} bytes, over the {max_bytes}-byte cap; "
            "store large data elsewhere and pass a reference.",
            meta={"size": size, "max_bytes": max_bytes},
        )


def _ensure_json(task: TaskDef[Any], payload: Any) -> None:
    try:
        json.dumps(payload, allow_nan=False)
    except (TypeError, ValueError) as error:
        raise _not_json(task.id, error) from None


def _not_json(task_id: str, error: Exception) -> RunlaneError:
    return RunlaneError(
        ErrorCode.PAYLOAD_INVALID, f"payload for task {task_id!r} is not JSON-serialisable: {error}"
    )
