"""Fuzzing the v1 wakeup envelope: any body parses to a wakeup or is a typed refusal.

A wakeup body comes from outside (a queue anyone with access can write to), so
the parser must answer every body, however broken, with a ``DeliveryMessage``
or ``ADAPTER_CONTRACT_VIOLATION``; and every message the runtime can build must
survive the trip through ``create`` and ``parse`` unchanged.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from runlane import ErrorCode, RunlaneError
from runlane.ports.transport import DeliveryMessage
from runlane.sqs import create_sqs_wakeup_body, parse_sqs_wakeup_body

FAST = settings(max_examples=300, deadline=None)

json_scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
names = st.text(min_size=1, max_size=40)


def envelope(**message_changes: Any) -> dict[str, Any]:
    message: dict[str, Any] = {"environment": {"name": "prod"}, "run_id": "run_1", "queue": "main"}
    message.update(message_changes)
    return {"type": "runlane.wakeup", "version": 1, "message": message}


def mutated_envelopes() -> st.SearchStrategy[dict[str, Any]]:
    """A valid envelope with one part replaced, removed or added."""
    top_level = st.sampled_from(["type", "version", "message", "extra"]).flatmap(
        lambda key: json_values.map(lambda value: {**envelope(), key: value})
    )
    dropped = st.sampled_from(["type", "version", "message"]).map(
        lambda key: {k: v for k, v in envelope().items() if k != key}
    )
    field = st.sampled_from(
        ["environment", "run_id", "queue", "requested_at", "trace_carrier", "extra"]
    ).flatmap(lambda key: json_values.map(lambda value: envelope(**{key: value})))
    return top_level | dropped | field


def assert_parses_or_is_refused(body: str | bytes) -> None:
    try:
        message = parse_sqs_wakeup_body(body)
    except RunlaneError as error:
        assert error.code is ErrorCode.ADAPTER_CONTRACT_VIOLATION
        return
    assert isinstance(message, DeliveryMessage)
    assert message.environment and message.run_id and message.queue


@FAST
@given(st.text(max_size=200) | st.binary(max_size=200))
@example("")
@example(b"\xff\xfe")
@example("\ud800")
@example('{"type": "runlane.wakeup", "version": 1, "message": {"run_id": "\\ud800"}}')
@example("[" * 100_000)
@example('{"a":' * 5_000 + "1" + "}" * 5_000)
def test_any_text_or_bytes_parse_or_are_refused_with_a_typed_error(body: str | bytes) -> None:
    assert_parses_or_is_refused(body)


@FAST
@given(json_values)
def test_any_json_value_parses_or_is_refused_with_a_typed_error(value: Any) -> None:
    assert_parses_or_is_refused(json.dumps(value))


@FAST
@given(mutated_envelopes())
def test_an_envelope_with_any_part_broken_parses_or_is_refused(value: dict[str, Any]) -> None:
    assert_parses_or_is_refused(json.dumps(value))


@pytest.mark.parametrize(
    "broken",
    [
        {**envelope(), "version": 2},
        {**envelope(), "version": "1"},
        {**envelope(), "type": "runlane.wakeup.v2"},
        envelope(run_id=""),
        envelope(run_id=42),
        envelope(queue=None),
        envelope(environment="prod"),
        envelope(environment={"name": ""}),
        envelope(requested_at="2026-01-01T00:00:00"),
        envelope(requested_at="yesterday"),
        envelope(trace_carrier={"traceparent": 1}),
        envelope(payload={"order_id": 1}),
    ],
)
def test_bodies_that_break_the_contract_are_refused(broken: dict[str, Any]) -> None:
    with pytest.raises(RunlaneError) as raised:
        parse_sqs_wakeup_body(json.dumps(broken))
    assert raised.value.code is ErrorCode.ADAPTER_CONTRACT_VIOLATION


offsets = st.integers(min_value=-(24 * 3600 - 1), max_value=24 * 3600 - 1).map(
    lambda seconds: timezone(timedelta(seconds=seconds))
)
moments = st.datetimes(
    min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=st.just(UTC) | offsets
)
messages = st.builds(
    DeliveryMessage,
    environment=names,
    run_id=names,
    queue=names,
    requested_at=st.none() | moments,
    trace_carrier=st.none()
    | st.dictionaries(st.text(max_size=20), st.text(max_size=40), max_size=3),
)


@FAST
@given(messages)
@example(
    DeliveryMessage(
        "prod", "run_1", "main", datetime(2026, 1, 1, tzinfo=timezone(timedelta(seconds=30)))
    )
)
def test_every_message_survives_create_and_parse(message: DeliveryMessage) -> None:
    body = create_sqs_wakeup_body(message)
    assert parse_sqs_wakeup_body(body) == message
    assert parse_sqs_wakeup_body(body.encode()) == message


@pytest.mark.parametrize(
    "message",
    [
        DeliveryMessage("", "run_1", "main"),
        DeliveryMessage("prod", "", "main"),
        DeliveryMessage("prod", "run_\ud800", "main"),
        DeliveryMessage("prod", "run_1", "main", requested_at=datetime(2026, 1, 1)),
        DeliveryMessage("prod", "run_1", "main", requested_at="2026-01-01"),  # type: ignore[arg-type]
        DeliveryMessage("prod", "run_1", "main", trace_carrier={"traceparent": 1}),  # type: ignore[dict-item]
        DeliveryMessage("prod", 7, "main"),  # type: ignore[arg-type]
    ],
)
def test_a_message_no_envelope_can_carry_is_a_typed_error(message: DeliveryMessage) -> None:
    with pytest.raises(RunlaneError) as raised:
        create_sqs_wakeup_body(message)
    assert raised.value.code is ErrorCode.ADAPTER_CONTRACT_VIOLATION
