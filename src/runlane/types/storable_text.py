"""Text that storage can keep: UTF-8 without NUL characters.

PostgreSQL's text and jsonb reject the NUL character (``\\x00``, ``\\u0000`` in
JSON), and no driver can encode a lone surrogate (``\\ud800``) as UTF-8, while
Python strings may hold both. So that every lane behaves alike and one bad value
never fails a whole batch of writes, values that callers choose (payloads, keys,
reasons) are refused with a typed error, results that hold them fail their own
run, and text the runtime must store whatever it holds (failure text from task
code) has them replaced.
"""

from __future__ import annotations

import math
import re
from typing import Any

NUL = "\x00"
#: What a NUL character or a lone surrogate in stored failure text becomes.
REPLACEMENT = "\ufffd"
#: How a JSON encoder writes a NUL character inside a string.
ESCAPED_NUL = "\\u0000"
_SURROGATE = re.compile("[\ud800-\udfff]")


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


def utf8_size(text: str) -> int | None:
    """Bytes of ``text`` in UTF-8, or ``None`` if it holds a lone surrogate."""
    if text.isascii():
        return len(text)
    try:
        return len(text.encode())
    except UnicodeEncodeError:
        return None


_NUL_REASON = "the NUL character (\\u0000), which PostgreSQL cannot store"
_SURROGATE_REASON = "a lone surrogate, which is not UTF-8"


def unstorable(text: str) -> str | None:
    """Why storage cannot keep ``text`` (``None`` if it can)."""
    if NUL in text:
        return _NUL_REASON
    if utf8_size(text) is None:
        return _SURROGATE_REASON
    return None


def measure_json(value: Any, encoded: str) -> tuple[int, str | None]:
    """UTF-8 size of JSON value ``value``, encoded (``ensure_ascii=False``) as ``encoded``,
    and why storage cannot keep it (``None`` if it can): one measurement for both."""
    size = utf8_size(encoded)
    if encoded_nul(value, encoded):
        return size or 0, _NUL_REASON
    if size is None:
        return 0, _SURROGATE_REASON
    return size, None


def unstorable_json(value: Any, encoded: str) -> str | None:
    """Why storage cannot keep JSON value ``value``, encoded (``ensure_ascii=False``) as
    ``encoded`` (``None`` if it can)."""
    return measure_json(value, encoded)[1]


def storable(text: str) -> str:
    """``text`` with NUL characters and lone surrogates replaced."""
    if NUL in text:
        text = text.replace(NUL, REPLACEMENT)
    if not text.isascii():
        text = _SURROGATE.sub(REPLACEMENT, text)
    return text


def storable_json(value: Any) -> Any:
    """``value`` as JSON storage can keep, whatever task code put in it: strings (keys
    included) :func:`storable`, non-finite floats and other objects as their ``repr``."""
    if isinstance(value, str):
        return storable(value)
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, dict):
        return {storable(str(k)): storable_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [storable_json(item) for item in value]
    return storable(repr(value))
