"""Text that storage can keep: no NUL characters.

PostgreSQL's text and jsonb reject the NUL character (``\\x00``, ``\\u0000`` in
JSON), while SQLite keeps it. So that both lanes behave alike, values that
callers choose (payloads, keys, reasons) are refused with a typed error, and
values the runtime must store whatever they hold (failure text from task code)
have it replaced.
"""

from __future__ import annotations

from typing import Any

NUL = "\x00"
#: What a NUL character in stored failure text becomes.
REPLACEMENT = "\ufffd"
#: How a JSON encoder writes a NUL character inside a string.
ESCAPED_NUL = "\\u0000"


def contains_nul(value: Any) -> bool:
    """Whether any string in a JSON value (keys included) holds a NUL character."""
    if isinstance(value, str):
        return NUL in value
    if isinstance(value, dict):
        return any(contains_nul(k) or contains_nul(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return any(contains_nul(item) for item in value)
    return False


def encoded_nul(value: Any, encoded: str) -> bool:
    """Whether JSON value ``value``, encoded as ``encoded``, holds a NUL character.

    The text check is cheap and almost always settles it; only a hit (which a
    literal backslash before ``u0000`` can also cause) walks the value.
    """
    return ESCAPED_NUL in encoded and contains_nul(value)


def without_nul(value: Any) -> Any:
    """A JSON value with every NUL character in its strings replaced."""
    if isinstance(value, str):
        return value.replace(NUL, REPLACEMENT) if NUL in value else value
    if isinstance(value, dict):
        return {without_nul(k): without_nul(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [without_nul(item) for item in value]
    return value
