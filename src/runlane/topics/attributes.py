"""Message attributes and attribute filters (contract 5.2.1).

A filter maps attribute names to allowed values. A message matches when, for
every filter attribute, it carries that attribute with a value equal to one of
the allowed values: exact code-point comparison, case-sensitive, no trimming.
Values in one list are alternatives; attributes are all required. That is the
subset an SNS filter policy can express, so both kinds of topic agree.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from runlane.topics.constants import (
    MAX_ATTRIBUTE_VALUE_LENGTH,
    MAX_ATTRIBUTES,
    MAX_FILTER_ATTRIBUTES,
    MAX_FILTER_VALUES,
)
from runlane.types.errors import ErrorCode, RunlaneError, configuration_error
from runlane.types.storable_text import unstorable

AttributeFilter = dict[str, tuple[str, ...]]
"""A normalised filter: attribute name → allowed values, in the order given."""

_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
#: Attribute names starting with this (in any case) are kept for the runtime's own use.
RESERVED_ATTRIBUTE_PREFIX = "runlane"


def attribute_name_problem(name: object) -> str | None:
    """Why ``name`` cannot be an attribute name (``None`` if it can)."""
    if not isinstance(name, str):
        return f"attribute names must be strings, got {type(name).__name__}"
    if _NAME.fullmatch(name) is None:
        return f"attribute name {name!r} must be 1-64 characters of letters, digits, '_' or '-'"
    if name.lower().startswith(RESERVED_ATTRIBUTE_PREFIX):
        return (
            f"attribute name {name!r} starts with {RESERVED_ATTRIBUTE_PREFIX!r}, which is reserved"
        )
    return None


def attribute_value_problem(value: object) -> str | None:
    """Why ``value`` cannot be an attribute value (``None`` if it can)."""
    if not isinstance(value, str):
        return f"must be a string, got {type(value).__name__}"
    if not 1 <= len(value) <= MAX_ATTRIBUTE_VALUE_LENGTH:
        return f"must be 1-{MAX_ATTRIBUTE_VALUE_LENGTH} characters long, got {len(value)}"
    problem = unstorable(value)
    return None if problem is None else f"must not contain {problem}"


def validate_attributes(attributes: object) -> dict[str, str]:
    """Return a message's attributes as a plain dict, or raise ``PAYLOAD_INVALID``.

    ``meta["attribute"]`` names the offending attribute when there is one.

    >>> validate_attributes({"event": "paid"})
    {'event': 'paid'}
    """
    if attributes is None:
        return {}
    if not isinstance(attributes, Mapping):
        raise RunlaneError(
            ErrorCode.PAYLOAD_INVALID,
            f"attributes must be a mapping of names to strings, got {type(attributes).__name__}.",
        )
    if len(attributes) > MAX_ATTRIBUTES:
        raise RunlaneError(
            ErrorCode.PAYLOAD_INVALID,
            f"a message carries at most {MAX_ATTRIBUTES} attributes, got {len(attributes)}; "
            "move the rest into the payload.",
        )
    result: dict[str, str] = {}
    for name, value in attributes.items():
        problem = attribute_name_problem(name)
        if problem is not None:
            raise RunlaneError(
                ErrorCode.PAYLOAD_INVALID, f"{problem}.", meta={"attribute": _shown(name)}
            )
        problem = attribute_value_problem(value)
        if problem is not None:
            raise RunlaneError(
                ErrorCode.PAYLOAD_INVALID,
                f"attribute {name!r} {problem}.",
                meta={"attribute": name},
            )
        result[name] = value
    return result


def normalize_filter(value: object, *, subscription: str) -> AttributeFilter | None:
    """Check a subscription's filter and return it normalised; ``{}`` becomes ``None``.

    Raises ``CONFIGURATION_INVALID`` saying what to change.

    >>> normalize_filter({"event": ["created", "paid"]}, subscription="orders.email")
    {'event': ('created', 'paid')}
    """
    where = f"subscription {subscription!r}: filter"
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise configuration_error(
            f"{where} must be a mapping of attribute names to lists of values, "
            f"got {type(value).__name__}."
        )
    if not value:
        return None
    if len(value) > MAX_FILTER_ATTRIBUTES:
        raise configuration_error(
            f"{where} names {len(value)} attributes; at most {MAX_FILTER_ATTRIBUTES} are allowed."
        )
    normalised: AttributeFilter = {}
    total = 0
    for name, allowed in value.items():
        problem = attribute_name_problem(name)
        if problem is not None:
            raise configuration_error(f"{where}: {problem}.")
        if isinstance(allowed, str) or not isinstance(allowed, list | tuple):
            raise configuration_error(
                f"{where}: the values of {name!r} must be a list of strings "
                f"(write [{allowed!r}] for one value), got {type(allowed).__name__}."
            )
        if not allowed:
            raise configuration_error(
                f"{where}: {name!r} lists no values; a message could never match it."
            )
        for item in allowed:
            problem = attribute_value_problem(item)
            if problem is not None:
                raise configuration_error(f"{where}: a value of {name!r} {problem}.")
        total += len(allowed)
        normalised[name] = tuple(allowed)
    if total > MAX_FILTER_VALUES:
        raise configuration_error(
            f"{where} lists {total} values in all; at most {MAX_FILTER_VALUES} are allowed."
        )
    return normalised


def filter_matches(attribute_filter: AttributeFilter | None, attributes: Mapping[str, str]) -> bool:
    """Whether a message with ``attributes`` passes ``attribute_filter`` (5.2.1).

    >>> filter_matches({"event": ("paid",)}, {"event": "paid", "region": "eu"})
    True
    >>> filter_matches({"event": ("paid",)}, {"event": "Paid"})
    False
    """
    if not attribute_filter:
        return True
    for name, allowed in attribute_filter.items():
        value = attributes.get(name)
        if value is None or value not in allowed:
            return False
    return True


def _shown(value: Any) -> Any:
    return value if isinstance(value, str | int | float | bool) or value is None else repr(value)
