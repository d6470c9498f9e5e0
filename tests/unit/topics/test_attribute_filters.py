"""Contract 5.2.1: message attributes, subscription filters, and how a filter matches."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runlane import ErrorCode, RunlaneError
from runlane.topics.attributes import filter_matches, normalize_filter, validate_attributes

# --- matching ---


def test_no_filter_and_an_empty_filter_match_every_message() -> None:
    assert filter_matches(None, {})
    assert filter_matches({}, {"event": "paid"})


def test_a_message_matches_when_its_value_is_one_of_the_allowed_values() -> None:
    allowed = {"event": ("created", "paid")}
    assert filter_matches(allowed, {"event": "created"})
    assert filter_matches(allowed, {"event": "paid"})
    assert not filter_matches(allowed, {"event": "refunded"})


def test_matching_is_case_sensitive() -> None:
    assert not filter_matches({"event": ("paid",)}, {"event": "Paid"})
    assert not filter_matches({"event": ("PAID",)}, {"event": "paid"})


def test_matching_neither_trims_nor_normalises() -> None:
    assert not filter_matches({"event": ("paid",)}, {"event": " paid"})
    assert not filter_matches({"event": ("paid",)}, {"event": "paid "})
    # "é" precomposed (U+00E9) and decomposed (e + U+0301) are different code points.
    assert not filter_matches({"name": ("caf\u00e9",)}, {"name": "cafe\u0301"})


def test_a_message_without_the_attribute_does_not_match() -> None:
    assert not filter_matches({"event": ("paid",)}, {"region": "eu"})


def test_every_filter_attribute_is_required() -> None:
    both = {"event": ("paid",), "region": ("eu", "us")}
    assert filter_matches(both, {"event": "paid", "region": "us"})
    assert not filter_matches(both, {"event": "paid"})
    assert not filter_matches(both, {"event": "paid", "region": "apac"})


def test_attributes_the_filter_does_not_name_are_ignored() -> None:
    assert filter_matches({"event": ("paid",)}, {"event": "paid", "region": "eu", "x": "y"})


def test_attribute_names_are_case_sensitive_too() -> None:
    assert not filter_matches({"event": ("paid",)}, {"Event": "paid"})


names = st.sampled_from(["a", "b", "c"])
values = st.sampled_from(["x", "X", "y", " x"])


@given(
    st.dictionaries(names, st.lists(values, min_size=1, max_size=3).map(tuple), max_size=3),
    st.dictionaries(names, values, max_size=3),
)
def test_a_match_is_exactly_every_named_attribute_present_with_an_allowed_value(
    attribute_filter: dict[str, tuple[str, ...]], attributes: dict[str, str]
) -> None:
    expected = all(
        name in attributes and any(attributes[name] == v for v in allowed)
        for name, allowed in attribute_filter.items()
    )
    assert filter_matches(attribute_filter, attributes) is expected


# --- filters as configured ---


def _bad_filter(value: Any) -> str:
    with pytest.raises(RunlaneError) as raised:
        normalize_filter(value, subscription="s")
    assert raised.value.code is ErrorCode.CONFIGURATION_INVALID
    return raised.value.message


def test_a_filter_accepts_lists_and_tuples_and_keeps_their_order() -> None:
    assert normalize_filter({"a": ["y", "x"], "b": ("z",)}, subscription="s") == {
        "a": ("y", "x"),
        "b": ("z",),
    }


def test_a_bare_string_is_refused_instead_of_read_as_letters() -> None:
    assert "write ['paid'] for one value" in _bad_filter({"event": "paid"})


def test_a_filter_names_at_most_5_attributes() -> None:
    assert normalize_filter({f"a{i}": ["v"] for i in range(5)}, subscription="s") is not None
    assert "at most 5" in _bad_filter({f"a{i}": ["v"] for i in range(6)})


def test_a_filter_lists_at_most_50_values_in_all() -> None:
    fifty = {"a": [f"v{i}" for i in range(25)], "b": [f"w{i}" for i in range(25)]}
    assert normalize_filter(fifty, subscription="s") is not None
    assert "at most 50" in _bad_filter({**fifty, "c": ["one too many"]})


@pytest.mark.parametrize(
    "value",
    [
        {"event": []},
        {"event": [""]},
        {"event": ["x" * 257]},
        {"event": [3]},
        {"event": ["nul\x00"]},
        {"event": ["\ud800"]},
        {"": ["v"]},
        {"has space": ["v"]},
        {"x" * 65: ["v"]},
        {"Runlane-id": ["v"]},
        {"RUNLANE": ["v"]},
        {1: ["v"]},
        "event=paid",
    ],
)
def test_bad_filters_are_refused(value: Any) -> None:
    _bad_filter(value)


def test_a_value_of_256_characters_and_a_name_of_64_are_allowed() -> None:
    assert normalize_filter({"n" * 64: ["v" * 256]}, subscription="s") == {"n" * 64: ("v" * 256,)}


# --- attributes on messages ---


def _bad_attributes(value: Any) -> RunlaneError:
    with pytest.raises(RunlaneError) as raised:
        validate_attributes(value)
    assert raised.value.code is ErrorCode.PAYLOAD_INVALID
    return raised.value


def test_no_attributes_are_an_empty_mapping() -> None:
    assert validate_attributes(None) == {}


def test_a_message_carries_at_most_10_attributes() -> None:
    ten = {f"a{i}": "v" for i in range(10)}
    assert validate_attributes(ten) == ten
    _bad_attributes({**ten, "eleventh": "v"})


@pytest.mark.parametrize(
    ("attributes", "named"),
    [
        ({"runlaneTrace": "v"}, "runlaneTrace"),
        ({"bad name": "v"}, "bad name"),
        ({"event": ""}, "event"),
        ({"event": "x" * 257}, "event"),
        ({"event": 1}, "event"),
        ({"event": "nul\x00"}, "event"),
        ({"event": "\udfff"}, "event"),
    ],
)
def test_a_bad_attribute_is_payload_invalid_and_named_in_meta(
    attributes: dict[str, Any], named: str
) -> None:
    assert _bad_attributes(attributes).meta == {"attribute": named}


def test_attributes_must_be_a_mapping() -> None:
    _bad_attributes([("event", "paid")])
