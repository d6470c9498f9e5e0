"""NUL characters: found in any string of a JSON value, replaced where text must be kept."""

from __future__ import annotations

import json

from runlane.core.text import REPLACEMENT, contains_nul, encoded_nul, without_nul


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


def test_without_nul_replaces_only_the_nul_characters() -> None:
    assert without_nul({"m": "a\x00b", "n": [1, "\x00"]}) == {
        "m": f"a{REPLACEMENT}b",
        "n": [1, REPLACEMENT],
    }
    clean = {"m": "ok"}
    assert without_nul(clean) == clean and without_nul(None) is None
