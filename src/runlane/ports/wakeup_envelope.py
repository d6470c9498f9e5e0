"""The v1 wakeup envelope: a strict JSON body that carries no payload."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from runlane.model.payloads import validation_problems
from runlane.ports.transport import DeliveryMessage
from runlane.types.errors import ErrorCode, RunlaneError

WAKEUP_TYPE = "runlane.wakeup"
WAKEUP_VERSION = 1


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class _Environment(_Strict):
    name: str = Field(min_length=1)


class _Message(_Strict):
    environment: _Environment
    run_id: str = Field(min_length=1)
    queue: str = Field(min_length=1)
    requested_at: datetime | None = Field(default=None, strict=False)
    trace_carrier: dict[str, str] | None = None

    @field_validator("requested_at")
    @classmethod
    def _aware(cls, value: datetime | None) -> datetime | None:
        if value is not None and value.tzinfo is None:
            raise ValueError("requested_at must carry a UTC offset")
        return value


class WakeupEnvelopeV1(_Strict):
    """``{"type": "runlane.wakeup", "version": 1, "message": {...}}``."""

    type: Literal["runlane.wakeup"]
    version: Literal[1]
    message: _Message


def create_wakeup_body(message: DeliveryMessage) -> str:
    """Serialise a delivery message as a v1 envelope.

    A message the envelope cannot carry (an empty name, a naive ``requested_at``,
    a non-string carrier value, text JSON cannot hold) is ADAPTER_CONTRACT_VIOLATION.
    """
    try:
        body: dict[str, Any] = {
            "environment": {"name": message.environment},
            "run_id": message.run_id,
            "queue": message.queue,
        }
        if message.requested_at is not None:
            requested_at = message.requested_at
            if isinstance(requested_at, datetime) and requested_at.utcoffset() is not None:
                # UTC always round-trips; an offset with seconds has no RFC 3339 form.
                requested_at = requested_at.astimezone(UTC)
            body["requested_at"] = requested_at.isoformat()
        if message.trace_carrier is not None:
            body["trace_carrier"] = dict(message.trace_carrier)
        envelope = {"type": WAKEUP_TYPE, "version": WAKEUP_VERSION, "message": body}
        validated = WakeupEnvelopeV1.model_validate_json(_dumps(envelope))
    except (ValidationError, ValueError, TypeError, AttributeError, OverflowError) as error:
        raise _not_an_envelope(
            error, "this message cannot be sent as a runlane v1 wakeup."
        ) from None
    return validated.model_dump_json(exclude_none=True)


def parse_wakeup_body(body: str | bytes) -> DeliveryMessage:
    """Parse and validate a v1 envelope; anything else is ADAPTER_CONTRACT_VIOLATION."""
    try:
        envelope = WakeupEnvelopeV1.model_validate_json(body)
    except (ValidationError, ValueError, TypeError) as error:
        raise _not_an_envelope(
            error, "the message body is not a runlane v1 wakeup envelope."
        ) from None
    message = envelope.message
    return DeliveryMessage(
        environment=message.environment.name,
        run_id=message.run_id,
        queue=message.queue,
        requested_at=message.requested_at,
        trace_carrier=dict(message.trace_carrier) if message.trace_carrier is not None else None,
    )


def _not_an_envelope(error: Exception, message: str) -> RunlaneError:
    problems = (
        validation_problems(error, root="<body>")
        if isinstance(error, ValidationError)
        else [type(error).__name__]
    )
    return RunlaneError(ErrorCode.ADAPTER_CONTRACT_VIOLATION, message, meta={"problems": problems})


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))
