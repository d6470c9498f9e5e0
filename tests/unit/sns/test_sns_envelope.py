"""The v1 message envelope of SNS topics: round trip, strict parsing, size counting."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from pydantic import BaseModel

from runlane import ErrorCode, RunlaneError
from runlane.ports.message_envelope import published_size
from runlane.sns import create_sns_message_body, parse_sns_envelope, parse_sns_message_body
from runlane.topics.messages import Message

PUBLISHED_AT = datetime(2026, 5, 1, 12, 30, 15, 250_000, tzinfo=UTC)


class Order(BaseModel):
    order_id: int
    note: str = ""


def message(payload: Any = None, **changes: Any) -> Message[Any]:
    fields: dict[str, Any] = {
        "id": "msg-1",
        "topic": "orders",
        "payload": {"order_id": 7} if payload is None else payload,
        "attributes": {"event": "paid"},
        "published_at": PUBLISHED_AT,
        "sequence": None,
    }
    fields.update(changes)
    return Message(**fields)


def test_every_field_round_trips() -> None:
    body = create_sns_message_body(
        message(), environment="production", trace_carrier={"traceparent": "00-a-b-01"}
    )
    envelope = parse_sns_envelope(body)
    assert envelope.message == message()
    assert envelope.environment == "production"
    assert envelope.trace_carrier == {"traceparent": "00-a-b-01"}
    assert parse_sns_message_body(body) == message()
    assert parse_sns_message_body(body.encode()) == message()
    document = json.loads(body)
    assert document["type"] == "runlane.message" and document["version"] == 1
    assert (
        "trace_carrier"
        not in json.loads(create_sns_message_body(message(), environment="e"))["message"]
    )


def test_a_model_payload_is_sent_as_json_and_times_in_utc() -> None:
    local = PUBLISHED_AT.astimezone(timezone(timedelta(hours=2)))
    body = create_sns_message_body(
        message(Order(order_id=3, note="é"), published_at=local), environment="e"
    )
    parsed = parse_sns_message_body(body)
    assert parsed.payload == {"order_id": 3, "note": "é"}
    assert parsed.published_at == PUBLISHED_AT and parsed.published_at.tzinfo is UTC


def good() -> dict[str, Any]:
    return json.loads(create_sns_message_body(message(), environment="e"))


def without(document: dict[str, Any], field: str) -> dict[str, Any]:
    document["message"].pop(field)
    return document


def changed(path: str, value: Any) -> dict[str, Any]:
    document = good()
    target = document if "." not in path else document["message"]
    target[path.split(".")[-1]] = value
    return document


BAD_BODIES: list[Any] = [
    "",
    "not json",
    "[]",
    '{"type": "runlane.message", "version": 1}',
    json.dumps(changed("type", "runlane.wakeup")),
    json.dumps(changed("version", 2)),
    json.dumps(changed("version", True)),
    json.dumps(changed("message.id", "")),
    json.dumps(changed("message.id", "a:b")),
    json.dumps(changed("message.environment", "")),
    json.dumps(changed("message.topic", 3)),
    json.dumps(changed("message.attributes", {"runlane_x": "1"})),
    json.dumps(changed("message.attributes", {"event": 1})),
    json.dumps(changed("message.attributes", None)),
    json.dumps(changed("message.published_at", "2026-05-01T12:00:00")),
    json.dumps(changed("message.published_at", "yesterday")),
    json.dumps(changed("message.trace_carrier", {"a": 1})),
    json.dumps(changed("message.trace_carrier", None)),
    json.dumps(changed("message.extra", 1)),
    json.dumps(changed("extra", 1)),
    json.dumps(without(good(), "payload")),
    json.dumps(without(good(), "published_at")),
    json.dumps(good()).replace('"order_id": 7', '"order_id": NaN'),
    json.dumps(good())[:-1] + ',"type":"runlane.message"}',
    b"\xff\xfe",
    None,
    7,
]


@pytest.mark.parametrize("body", BAD_BODIES)
def test_anything_but_a_v1_envelope_is_an_adapter_contract_violation(body: Any) -> None:
    with pytest.raises(RunlaneError) as raised:
        parse_sns_message_body(body)
    assert raised.value.code is ErrorCode.ADAPTER_CONTRACT_VIOLATION
    assert "envelope" in raised.value.message


def test_a_message_the_envelope_cannot_carry_is_refused_before_sending() -> None:
    for bad in (message(float("nan")), message(published_at=datetime(2026, 1, 1))):
        with pytest.raises(RunlaneError) as raised:
            create_sns_message_body(bad, environment="e")
        assert raised.value.code is ErrorCode.ADAPTER_CONTRACT_VIOLATION


def test_the_size_counts_body_and_attribute_names_values_and_types_in_bytes() -> None:
    assert published_size("é", {}) == 2
    assert published_size("ab", {"event": "paid", "k": "é"}) == 2 + (5 + 4 + 6) + (1 + 2 + 6)
