"""JSON text as it is stored: decoded exactly as ``json.loads`` decodes it, faster."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, cast

#: The standard decoder's scanner: ``json.loads`` of a string is this scan from
#: position 0 to the end, after a Python layer (type checks, a decoder method, two
#: whitespace regex matches) that costs a few times the scan of a short value.
_SCAN: Callable[[str, int], tuple[Any, int]] = cast(Any, json.JSONDecoder()).scan_once


def load_json(value: str | bytes) -> Any:
    """Decode a stored JSON column: ``json.loads(value)``, scanning compact text (what
    the drivers store) directly.

    Drivers hand JSON columns over as text (the PostgreSQL driver loads jsonb as
    text too): a decoded JSON string would be indistinguishable from JSON text.
    Anything but compact text (bytes, surrounding whitespace, a byte-order mark,
    text that is not JSON) goes through ``json.loads``, which decodes it or raises
    as it always has.
    """
    if type(value) is str:
        try:
            decoded, end = _SCAN(value, 0)
        except StopIteration:
            pass  # no value at position 0 (or deeper): json.loads says why
        else:
            if end == len(value):
                return decoded
    return json.loads(value)
