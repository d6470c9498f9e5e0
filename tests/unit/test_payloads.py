"""Payload validation and the size cap, applied before anything is written."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from runlane import Context, ErrorCode, RunlaneError, TaskDef, task
from runlane.model.payloads import (
    DEFAULT_MAX_PAYLOAD_BYTES,
    MAX_VALIDATION_PROBLEMS,
    encode_payload,
    prepare_payload,
    prepare_payloads,
    validate_payload,
    validation_problems,
)


class Order(BaseModel):
    order_id: int
    note: str = ""


class Refund(BaseModel):
    order_id: int


class Measurement(BaseModel):
    value: float


def _task(schema: type[BaseModel] | None = None) -> TaskDef[Any]:
    def handler(payload: Any, ctx: Context) -> None:
        return None

    return task("orders.record", schema=schema)(handler)


def _accept(definition: TaskDef[Any], payload: Any) -> str:
    """What a trigger does before writing: validate, then encode under the cap."""
    return prepare_payload(definition, payload, DEFAULT_MAX_PAYLOAD_BYTES)[2]


@pytest.mark.parametrize("schema", [None, Order])
def test_long_multibyte_payloads_are_measured_in_bytes(schema: type[BaseModel] | None) -> None:
    definition = _task(schema)
    fits = {"order_id": 1, "note": "€" * 80_000}  # 240,000 bytes, 80,000 characters
    assert len(_accept(definition, fits).encode()) < DEFAULT_MAX_PAYLOAD_BYTES
    with pytest.raises(RunlaneError) as caught:
        _accept(definition, {"order_id": 1, "note": "€" * 90_000})
    assert caught.value.code is ErrorCode.PAYLOAD_TOO_LARGE
    assert caught.value.meta["size"] > DEFAULT_MAX_PAYLOAD_BYTES


def test_prepare_and_validate_then_encode_agree() -> None:
    for definition, payload in ((_task(), {"b": [1, 2.5, None]}), (_task(Order), {"order_id": 3})):
        _, value = validate_payload(definition, payload)
        encoded = encode_payload(definition.id, value, DEFAULT_MAX_PAYLOAD_BYTES)
        assert prepare_payload(definition, payload, DEFAULT_MAX_PAYLOAD_BYTES)[1:] == (
            value,
            encoded,
        )


def _rejected(call: Any, *args: Any) -> RunlaneError:
    with pytest.raises(RunlaneError) as caught:
        call(*args)
    return caught.value


def test_the_default_cap_is_256_kib() -> None:
    assert DEFAULT_MAX_PAYLOAD_BYTES == 256 * 1024


def test_a_dict_is_validated_into_the_schema_instance_and_stored_as_json() -> None:
    instance, stored = validate_payload(_task(Order), {"order_id": "7"})
    assert instance == Order(order_id=7)
    assert stored == {"order_id": 7, "note": ""}


def test_an_instance_of_the_schema_is_accepted() -> None:
    instance, stored = validate_payload(_task(Order), Order(order_id=3, note="gift"))
    assert instance == Order(order_id=3, note="gift")
    assert stored == {"order_id": 3, "note": "gift"}


def test_an_invalid_payload_is_payload_invalid_with_the_problems_in_meta() -> None:
    error = _rejected(validate_payload, _task(Order), {"order_id": "seven"})
    assert error.code is ErrorCode.PAYLOAD_INVALID
    assert "order_id" in error.message
    assert error.meta["errors"][0]["loc"] == ["order_id"]
    # The rejected input is not echoed back: it may hold personal data.
    assert "seven" not in json.dumps(error.meta)


def test_validation_problems_name_each_location_and_at_most_the_first_five() -> None:
    class Wide(BaseModel):
        amounts: list[int]

    with pytest.raises(ValidationError) as raised:
        Wide.model_validate({"amounts": ["a"] * 8})
    problems = validation_problems(raised.value)
    assert len(problems) == MAX_VALIDATION_PROBLEMS == 5
    assert (
        problems[0]
        == "amounts.0: Input should be a valid integer, unable to parse string as an integer"
    )
    with pytest.raises(ValidationError) as at_root:
        Order.model_validate(7)
    assert validation_problems(at_root.value)[0].startswith("<root>: ")
    assert validation_problems(at_root.value, root="<body>")[0].startswith("<body>: ")


def test_a_missing_field_is_payload_invalid() -> None:
    assert _rejected(validate_payload, _task(Order), {}).code is ErrorCode.PAYLOAD_INVALID


def test_an_instance_of_another_model_is_payload_invalid() -> None:
    error = _rejected(validate_payload, _task(Order), Refund(order_id=1))
    assert error.code is ErrorCode.PAYLOAD_INVALID
    assert "Refund" in error.message


def test_without_a_schema_any_json_value_passes_through() -> None:
    definition = _task()
    for payload in [None, 1, "text", [1, 2], {"nested": {"ok": True}}]:
        assert validate_payload(definition, payload) == (payload, payload)


def test_without_a_schema_a_model_instance_is_stored_as_its_json() -> None:
    assert validate_payload(_task(), Order(order_id=1)) == (
        {"order_id": 1, "note": ""},
        {"order_id": 1, "note": ""},
    )


@pytest.mark.parametrize("payload", [{"at": object()}, {1, 2}, {"x": math.nan}, math.inf])
def test_without_a_schema_a_value_that_is_not_json_is_payload_invalid(payload: Any) -> None:
    assert _rejected(validate_payload, _task(), payload).code is ErrorCode.PAYLOAD_INVALID


def test_with_a_schema_a_value_that_is_not_strict_json_is_payload_invalid() -> None:
    # The schemaless path already refuses NaN; a schema must not let it through and
    # store the non-JSON token NaN (PostgreSQL's jsonb rejects it at write time).
    error = _rejected(_accept, _task(Measurement), {"value": math.nan})
    assert error.code is ErrorCode.PAYLOAD_INVALID


def test_a_payload_at_the_cap_is_accepted_and_one_byte_over_is_payload_too_large() -> None:
    encoded = encode_payload("t", {"blob": "x" * 100}, 1000)
    size = len(encoded.encode())
    assert encode_payload("t", {"blob": "x" * 100}, size) == encoded
    error = _rejected(encode_payload, "t", {"blob": "x" * 100}, size - 1)
    assert error.code is ErrorCode.PAYLOAD_TOO_LARGE
    assert error.meta == {"size": size, "max_bytes": size - 1}


def test_the_cap_counts_utf8_bytes_not_characters() -> None:
    payload = {"text": "ü" * 10}
    characters = len(json.dumps(payload, separators=(",", ":"), ensure_ascii=False))
    assert _rejected(encode_payload, "t", payload, characters).code is ErrorCode.PAYLOAD_TOO_LARGE


def test_an_oversized_payload_is_rejected_under_the_default_cap() -> None:
    huge = {"blob": "x" * DEFAULT_MAX_PAYLOAD_BYTES}
    assert _rejected(_accept, _task(), huge).code is ErrorCode.PAYLOAD_TOO_LARGE


def test_encoding_is_compact_json_that_round_trips() -> None:
    payload = {"order_id": 7, "lines": [1, 2], "name": "Zoë"}
    encoded = encode_payload("t", payload, DEFAULT_MAX_PAYLOAD_BYTES)
    assert " " not in encoded
    assert json.loads(encoded) == payload


@pytest.mark.parametrize("schema", [None, Order])
def test_prepare_payloads_prepares_each_as_prepare_payload_does(
    schema: type[BaseModel] | None,
) -> None:
    definition = _task(schema)
    payloads: list[Any] = [
        {"order_id": 1},
        {"order_id": 2, "note": "ü and \u2028"},  # not ASCII: the general path
        Order(order_id=3),
        {"order_id": 4, "note": "x" * 60},
    ]
    if schema is None:
        payloads += [[1, 2], "text", None, {"order_id": 5, "nested": {"a": [1]}}, 1e16]
    instances, values, texts = prepare_payloads(definition, payloads, 200)
    expected = [prepare_payload(definition, payload, 200) for payload in payloads]
    assert instances == [e[0] for e in expected]
    assert values == [e[1] for e in expected]
    assert texts == [e[2] for e in expected]


@pytest.mark.parametrize(
    ("bad", "code"),
    [
        ({"order_id": 1, "note": "x" * 300}, ErrorCode.PAYLOAD_TOO_LARGE),  # over the cap
        ({"order_id": 1, "note": "nul \x00"}, ErrorCode.PAYLOAD_INVALID),
        ({"order_id": float("nan")}, ErrorCode.PAYLOAD_INVALID),
        ({1: "int key"}, ErrorCode.PAYLOAD_INVALID),
    ],
)
def test_prepare_payloads_refuses_the_first_bad_payload_as_prepare_payload_does(
    bad: Any, code: ErrorCode
) -> None:
    definition = _task()
    with pytest.raises(RunlaneError) as one:
        prepare_payload(definition, bad, 200)
    with pytest.raises(RunlaneError) as many:
        prepare_payloads(definition, [{"order_id": 0}, bad, {"order_id": 2}], 200)
    assert one.value.code is many.value.code is code
    assert str(many.value) == str(one.value)
