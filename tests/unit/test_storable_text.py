"""Text storage can keep: NUL characters and lone surrogates found, refused or replaced."""

from __future__ import annotations

import json

from runlane.types.storable_text import (
    REPLACEMENT,
    contains_nul,
    encoded_nul,
    storable,
    storable_json,
    unstorable,
    unstorable_json,
)


def test_nul_is_found_in_keys_values_and_nested_lists() -> None:
    assert contains_nul({"a": ["x", {"b": "y\x00"}]})
    assert contains_nul({"k\x00": 1})
    assert not contains_nul({"a": ["x", 1, None, 2.5, True]})


def test_a_literal_backslash_u0000_is_not_a_nul() -> None:
    value = {"path": "C:\\u0000"}  # a backslash and five characters, no NUL
    encoded = json.dumps(value)
    assert "\\u0000" in encoded and not encoded_nul(value, encoded)
    nul = {"path": "\x00"}
    assert encoded_nul(nul, json.dumps(nul))


def test_lone_surrogates_are_not_storable_but_real_unicode_is() -> None:
    assert unstorable("naïve ☃ 𝄞") is None
    assert unstorable("a\ud800") is not None and "surrogate" in str(unstorable("a\ud800"))
    assert "NUL" in str(unstorable("\x00"))
    value = {"k": ["\udfff"]}
    assert unstorable_json(value, json.dumps(value, ensure_ascii=False)) is not None
    ok = {"k": ["é"]}
    assert unstorable_json(ok, json.dumps(ok, ensure_ascii=False)) is None


def test_storable_replaces_only_what_storage_cannot_keep() -> None:
    assert storable("a\x00b\ud800c é") == f"a{REPLACEMENT}b{REPLACEMENT}c é"
    assert storable_json({"m\x00": "a\x00b", "n": [1, "\ud800"]}) == {
        f"m{REPLACEMENT}": f"a{REPLACEMENT}b",
        "n": [1, REPLACEMENT],
    }
    clean = {"m": "ok"}
    assert storable_json(clean) == clean and storable_json(None) is None


def test_storable_json_turns_what_json_cannot_hold_into_text() -> None:
    value = {1: float("nan"), "o": object(), "t": (1, float("inf"))}
    safe = storable_json(value)
    assert safe["1"] == "nan" and safe["t"] == [1, "inf"]
    assert safe["o"].startswith("<object object")
    json.dumps(safe, allow_nan=False)
