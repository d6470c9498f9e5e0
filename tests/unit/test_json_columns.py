"""Stored JSON columns decode exactly as ``json.loads`` decodes them, errors included."""

from __future__ import annotations

import json

import pytest

from runlane.model.payloads import UnreadablePayload
from runlane.storage.sql.encoding import dumps, load_carrier, load_json, load_payload

VALUES = [
    {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
    {"n": 1, "nested": [1, 2.5, None, True, {"é": "snow ☃"}], "": ""},
    [],
    "a string",
    12,
    -0.5,
    None,
    float("inf"),
]


@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_compact_text_decodes_as_json_loads_does(value: object) -> None:
    text = dumps(value)
    assert load_json(text) == json.loads(text)
    assert type(load_json(text)) is type(json.loads(text))


@pytest.mark.parametrize(
    "text",
    [' {"a": 1}', '{"a": 1}\n', "\ufeff{}", b'{"a":1}', "1 2", '{"a":}', '{"a":[1,}', "", "[" * 3],
    ids=repr,
)
def test_other_text_decodes_or_fails_as_json_loads_does(text: str | bytes) -> None:
    try:
        expected: object = json.loads(text)
    except ValueError as error:
        with pytest.raises(type(error)) as raised:
            load_json(text)
        assert str(raised.value) == str(error)
        assert load_carrier(text) is None
        assert isinstance(load_payload(text), UnreadablePayload)
    else:
        assert load_json(text) == expected
