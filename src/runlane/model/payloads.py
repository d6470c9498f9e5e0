"""Payload validation and the size cap, applied before anything is written."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, cast

from pydantic import BaseModel, ValidationError

from runlane.types.errors import ErrorCode, RunlaneError
from runlane.types.storable_text import ESCAPED_NUL, measure_json

if TYPE_CHECKING:
    from runlane.model.definitions import TaskDef

DEFAULT_MAX_PAYLOAD_BYTES = 256 * 1024
#: Deepest nesting of lists and objects a payload may have. Fixed, far below Python's
#: recursion limit, so a payload one process accepts every other process can decode,
#: however deep in its stack it does so.
MAX_PAYLOAD_DEPTH = 64
#: An error message names at most this many of the problems pydantic found (the first).
MAX_VALIDATION_PROBLEMS = 5
_SCALARS = frozenset({str, int, float, bool, type(None)})
_STR_ONLY = frozenset({str})


class UnreadablePayload:
    """Stands in for a stored payload that cannot be decoded (written by an older version,
    or corrupted): its run fails with ``PAYLOAD_INVALID`` instead of blocking others."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def __repr__(self) -> str:
        return f"UnreadablePayload({self.reason!r})"


def json_shape_problem(value: Any, *, max_depth: int = MAX_PAYLOAD_DEPTH) -> str | None:
    """Why JSON cannot hold ``value`` faithfully (``None`` if it can).

    Only plain ``dict`` (string keys), ``list``, ``str``, ``int``, ``float``, ``bool``
    and ``None`` read back from JSON as they were written, so only they are accepted
    (a tuple would come back a list, an int key a string key, an enum its value).
    Iterative, so a deep value cannot exhaust the stack; nesting is capped.
    """
    scalars = _SCALARS
    if type(value) in scalars:
        return None
    pending: list[tuple[Any, int]] = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        kind = type(item)
        if kind is not dict and kind is not list:
            return (
                f"a {kind.__name__} value, which JSON cannot hold as it is "
                "(convert it to a string, number, list or dict of these)"
            )
        if depth > max_depth:
            return f"lists or objects nested more than {max_depth} levels deep"
        # Type sets are built in C: most containers hold only scalars, and then no
        # element is looked at in Python.
        if kind is dict:
            if not _STR_ONLY.issuperset(map(type, item)):
                key = next(k for k in item if type(k) is not str)
                return f"a non-string object key {key!r} (JSON keys are strings)"
            children = item.values()
        else:
            children = item
        if not scalars.issuperset(map(type, children)):
            pending.extend((child, depth + 1) for child in children if type(child) not in scalars)
    return None


#: One encoder for every payload (``json.dumps`` with options builds one per call).
_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode


def _refuse(value: Any) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def compact_encoder(*, allow_nan: bool) -> Callable[[Any], str]:
    """Compact JSON text (``","`` and ``":"`` separators, UTF-8 kept) for values known
    to be JSON-shaped: the C encoder built once, without the cycle check, instead of
    ``JSONEncoder.encode``, which builds one per call. Same text; the plain encoder
    where the C one is missing.

    Callers pass only values that cannot hold a cycle: payloads that
    :func:`json_shape_problem` accepted (its depth cap refuses a cycle), results
    already encoded once with the check, and records the runtime builds itself.
    """
    encode = _chunk_encoder(allow_nan=allow_nan)
    if encode is None:
        return json.JSONEncoder(
            separators=(",", ":"), ensure_ascii=False, allow_nan=allow_nan
        ).encode

    def encode_compact(value: Any) -> str:
        return "".join(encode(value, 0))

    return encode_compact


def _chunk_encoder(*, allow_nan: bool) -> Callable[[Any, int], Sequence[str]] | None:
    """The C encoder of :func:`compact_encoder` (its chunks joined are the text), or
    ``None`` where it is missing."""
    make_encoder = getattr(json.encoder, "c_make_encoder", None)
    if make_encoder is None:
        return None
    return cast(
        Callable[[Any, int], Sequence[str]],
        make_encoder(
            None, _refuse, json.encoder.encode_basestring, None, ":", ",", False, False, allow_nan
        ),
    )


_encode_shaped = compact_encoder(allow_nan=False)
_shaped_chunks = _chunk_encoder(allow_nan=False)


def prepare_payload(task: TaskDef[Any], payload: Any, max_bytes: int) -> tuple[Any, Any, str]:
    """Return ``(value for the handler, JSON value, its text)``: validated, capped, encoded.

    A schema-less payload is checked by encoding it, so it is serialised once.
    """
    if (
        task.schema is None
        and type(payload) is dict
        and _STR_ONLY.issuperset(map(type, payload))
        and _SCALARS.issuperset(map(type, payload.values()))
    ):
        # The common payload, a flat dict of scalars, checked inline: the general path
        # below accepts it too, with the same text, through half a dozen calls. Anything
        # this cannot settle at once (a value JSON refuses, non-ASCII text, a NUL, the
        # cap) goes the general way, which says what is wrong.
        try:
            encoded = _encode_shaped(payload)
        except (TypeError, ValueError):
            pass
        else:
            if encoded.isascii() and len(encoded) <= max_bytes and ESCAPED_NUL not in encoded:
                return payload, payload, encoded
    if task.schema is not None:
        instance, value = validate_payload(task, payload)
        return instance, value, encode_payload(task.id, value, max_bytes)
    if isinstance(payload, BaseModel):
        payload = _dump_model(task.id, payload)
    _check_shape(task.id, payload)
    try:
        encoded = _encode_shaped(payload)
    except (TypeError, ValueError) as error:
        raise _not_json(task.id, error) from None
    _check_storable(task.id, payload, encoded, max_bytes)
    return payload, payload, encoded


def prepare_payloads(
    task: TaskDef[Any], payloads: Iterable[Any], max_bytes: int
) -> tuple[list[Any], list[Any], list[str]]:
    """:func:`prepare_payload` of each of ``payloads`` (raises on the first bad one), as
    three parallel lists; for a task without a schema the first two are one list (the
    handler gets the JSON value itself)."""
    if task.schema is not None or _shaped_chunks is None:
        prepared = [prepare_payload(task, payload, max_bytes) for payload in payloads]
        return [p[0] for p in prepared], [p[1] for p in prepared], [p[2] for p in prepared]
    values: list[Any] = []
    texts: list[str] = []
    add_value, add_text = values.append, texts.append
    chunks, join = _shaped_chunks, "".join
    str_only, scalars = _STR_ONLY.issuperset, _SCALARS.issuperset
    for payload in payloads:
        # prepare_payload's check of a flat dict of scalars, inline: no call per payload.
        if (
            type(payload) is dict
            and str_only(map(type, payload))
            and scalars(map(type, payload.values()))
        ):
            try:
                encoded = join(chunks(payload, 0))
            except (TypeError, ValueError):
                pass
            else:
                if encoded.isascii() and len(encoded) <= max_bytes and ESCAPED_NUL not in encoded:
                    add_value(payload)
                    add_text(encoded)
                    continue
        _, value, encoded = prepare_payload(task, payload, max_bytes)
        add_value(value)
        add_text(encoded)
    return values, values, texts


def payload_for_handler(task: TaskDef[Any], stored: Any) -> Any:
    """The value a handler gets for a payload read from storage, or PAYLOAD_INVALID."""
    if isinstance(stored, UnreadablePayload):
        raise RunlaneError(
            ErrorCode.PAYLOAD_INVALID,
            f"the stored payload of this run of task {task.id!r} cannot be read "
            f"({stored.reason}); trigger a new run with a valid payload.",
        )
    # A schema-less payload came out of storage as JSON already: nothing to check.
    return validate_payload(task, stored)[0] if task.schema is not None else stored


def validate_payload(task: TaskDef[Any], payload: Any) -> tuple[Any, Any]:
    """Return ``(value for the handler, JSON value for storage)`` or raise PAYLOAD_INVALID."""
    schema = task.schema
    if schema is None:
        if isinstance(payload, BaseModel):
            payload = _dump_model(task.id, payload)
        _check_shape(task.id, payload)
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
        problems = "; ".join(validation_problems(error))
        raise RunlaneError(
            ErrorCode.PAYLOAD_INVALID,
            f"payload for task {task.id!r} is invalid: {problems}",
            meta={"errors": json.loads(error.json(include_url=False, include_input=False))},
        ) from None
    except (ValueError, TypeError, RecursionError) as error:
        # Pydantic gives up on input nested deeper than it recurses, and custom
        # validators may raise anything; none of it is a valid payload.
        raise RunlaneError(
            ErrorCode.PAYLOAD_INVALID,
            f"payload for task {task.id!r} is invalid: {_brief(error)}",
        ) from None
    value = _dump_model(task.id, instance)
    _check_shape(task.id, value)
    return instance, value


def validation_problems(error: ValidationError, *, root: str = "<root>") -> list[str]:
    """The first problems pydantic found, each as ``location: message`` (``root`` names
    the value itself), for an error message a reader can act on.

    >>> validation_problems(error)
    ['amount: Input should be greater than 0', 'currency: Field required']
    """
    return [
        f"{'.'.join(str(part) for part in issue['loc']) or root}: {issue['msg']}"
        for issue in error.errors()[:MAX_VALIDATION_PROBLEMS]
    ]


def _dump_model(task_id: str, model: BaseModel) -> Any:
    try:
        return model.model_dump(mode="json")
    except (ValueError, TypeError, RecursionError) as error:
        # Bytes that are not UTF-8 in an ``object`` field, values too deep to serialise.
        raise RunlaneError(
            ErrorCode.PAYLOAD_INVALID,
            f"payload for task {task_id!r} cannot be stored as JSON: {_brief(error)}; "
            "encode binary data (base64, for one) or drop it.",
        ) from None


def _check_shape(task_id: str, value: Any) -> None:
    problem = json_shape_problem(value)
    if problem is not None:
        raise RunlaneError(
            ErrorCode.PAYLOAD_INVALID, f"payload for task {task_id!r} contains {problem}."
        )


def _brief(error: BaseException) -> str:
    """A one-line, bounded description of ``error`` (its text may be huge or fail)."""
    try:
        text = str(error).splitlines()[0] if str(error) else ""
    except Exception:
        text = ""
    text = text[:200]
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


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
