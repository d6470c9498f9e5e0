"""The v1 message envelope a brokered topic (SNS) carries (contract 5.11.3).

``{"type": "runlane.message", "version": 1, "message": {"id", "environment",
"topic", "payload", "attributes", "published_at", "trace_carrier"?}}``: the whole
message in the SNS ``Message``, so a consumer needs nothing but the body. Parsing
is strict: anything else is ``ADAPTER_CONTRACT_VIOLATION``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel

from runlane.topics.attributes import validate_attributes
from runlane.topics.messages import Message
from runlane.types.carriers import validate_trace_carrier
from runlane.types.errors import ErrorCode, RunlaneError
from runlane.types.ids import validate_identifier
from runlane.types.storable_text import unstorable

MESSAGE_TYPE = "runlane.message"
MESSAGE_VERSION = 1
#: The SNS data type every attribute is published with.
ATTRIBUTE_DATA_TYPE = "String"
_TOP_LEVEL = frozenset({"type", "version", "message"})
_REQUIRED = frozenset({"id", "environment", "topic", "payload", "attributes", "published_at"})
_OPTIONAL = frozenset({"trace_carrier"})


@dataclass(frozen=True, slots=True)
class SnsEnvelope:
    """A parsed envelope: the message, and what travels with it but is not part of it."""

    message: Message[Any]
    environment: str
    trace_carrier: dict[str, str] | None


def create_sns_message_body(
    message: Message[Any], *, environment: str, trace_carrier: Mapping[str, str] | None = None
) -> str:
    """The SNS ``Message`` of ``message``: its v1 envelope as compact JSON.

    A pydantic payload is dumped in JSON mode; ``published_at`` is written in UTC.
    A message the envelope cannot carry is ``ADAPTER_CONTRACT_VIOLATION``.

    >>> body = create_sns_message_body(message, environment="production")
    """
    text = envelope_text(message, environment=environment, trace_carrier=trace_carrier)
    parse_sns_envelope(text)  # what cannot be read back must not be sent
    return text


def envelope_text(
    message: Message[Any], *, environment: str, trace_carrier: Mapping[str, str] | None = None
) -> str:
    """The envelope as JSON without reading it back: for a message already validated
    (``validate_publish`` checked its id, attributes, carrier and payload)."""
    if not isinstance(message, Message):
        raise _violation(f"create_sns_message_body needs a Message, got {type(message).__name__}")
    payload = message.payload
    if isinstance(payload, BaseModel):
        payload = payload.model_dump(mode="json")
    published_at = message.published_at
    if not isinstance(published_at, datetime) or published_at.utcoffset() is None:
        raise _violation("published_at must be an aware datetime")
    body: dict[str, Any] = {
        "id": message.id,
        "environment": environment,
        "topic": message.topic,
        "payload": payload,
        "attributes": dict(message.attributes),
        "published_at": published_at.astimezone(UTC).isoformat(),
    }
    if trace_carrier is not None:
        body["trace_carrier"] = dict(trace_carrier)
    try:
        text = json.dumps(
            {"type": MESSAGE_TYPE, "version": MESSAGE_VERSION, "message": body},
            separators=(",", ":"),
            ensure_ascii=False,
            allow_nan=False,
        )
    except (TypeError, ValueError, RecursionError) as error:
        raise _violation(f"the message is not JSON ({type(error).__name__})") from None
    return text


def parse_sns_message_body(body: str | bytes) -> Message[Any]:
    """The :class:`~runlane.topics.messages.Message` a v1 envelope carries.

    The payload is the plain JSON value (a consumer validates it against the
    topic's schema); ``sequence`` is ``None``. Anything but a v1 envelope is
    ``ADAPTER_CONTRACT_VIOLATION``; :func:`parse_sns_envelope` also returns the
    environment and trace carrier.
    """
    return parse_sns_envelope(body).message


def parse_sns_envelope(body: str | bytes) -> SnsEnvelope:
    """Parse a v1 envelope strictly: every field present and well-formed, nothing else."""
    if isinstance(body, bytes | bytearray):
        try:
            body = bytes(body).decode("utf-8")
        except UnicodeDecodeError:
            raise _violation("the body is not UTF-8") from None
    if not isinstance(body, str):
        raise _violation(f"the body must be a string, got {type(body).__name__}")
    try:
        document = json.loads(body, parse_constant=_refuse_constant, object_pairs_hook=_unique)
    except (ValueError, RecursionError):
        raise _violation("the body is not strict JSON") from None
    if not isinstance(document, dict) or set(document) != _TOP_LEVEL:
        raise _violation("the body must be an object with exactly type, version and message")
    if document["type"] != MESSAGE_TYPE:
        raise _violation(f"type must be {MESSAGE_TYPE!r}")
    version = document["version"]
    if isinstance(version, bool) or version != MESSAGE_VERSION:
        raise _violation(f"version must be {MESSAGE_VERSION}")
    fields = document["message"]
    if not isinstance(fields, dict):
        raise _violation("message must be an object")
    missing = sorted(_REQUIRED - set(fields))
    unknown = sorted(set(fields) - _REQUIRED - _OPTIONAL)
    if missing or unknown:
        raise _violation(f"message fields missing {missing}, unknown {unknown}")
    message_id = _identifier(fields["id"], "message.id")
    topic = _identifier(fields["topic"], "message.topic")
    environment = fields["environment"]
    if not isinstance(environment, str) or not environment or unstorable(environment):
        raise _violation("message.environment must be a non-empty string")
    try:
        attributes = validate_attributes(fields["attributes"])
        carrier = validate_trace_carrier(fields.get("trace_carrier"))
    except RunlaneError as error:
        raise _violation(error.message) from None
    if not isinstance(fields["attributes"], dict) or (
        "trace_carrier" in fields and fields["trace_carrier"] is None
    ):
        raise _violation("message.attributes must be an object, trace_carrier an object")
    return SnsEnvelope(
        message=Message(
            id=message_id,
            topic=topic,
            payload=fields["payload"],
            attributes=attributes,
            published_at=_timestamp(fields["published_at"]),
            sequence=None,
        ),
        environment=environment,
        trace_carrier=carrier,
    )


def published_size(body: str, attributes: Mapping[str, str]) -> int:
    """Bytes SNS counts for a publish: the body plus each attribute's name, value and type."""
    size = len(body.encode("utf-8"))
    for name, value in attributes.items():
        size += len(name.encode()) + len(value.encode()) + len(ATTRIBUTE_DATA_TYPE)
    return size


def _identifier(value: object, field: str) -> str:
    try:
        return validate_identifier(value, name=field)
    except RunlaneError as error:
        raise _violation(error.message) from None


def _timestamp(value: object) -> datetime:
    if not isinstance(value, str):
        raise _violation("message.published_at must be an ISO 8601 string")
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise _violation("message.published_at must be an ISO 8601 string") from None
    if parsed.utcoffset() is None:
        raise _violation("message.published_at must carry a UTC offset")
    return parsed.astimezone(UTC)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        raise ValueError("duplicate object key")
    return result


def _violation(problem: str) -> RunlaneError:
    return RunlaneError(
        ErrorCode.ADAPTER_CONTRACT_VIOLATION,
        f"the message body is not a runlane v1 message envelope: {problem}.",
        meta={"problem": problem},
    )
