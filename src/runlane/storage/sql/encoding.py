"""Values as SQL drivers store them: compact JSON text, and times as integer
microseconds since the Unix epoch. Payloads and trace carriers that cannot be
decoded never fail the read that found them."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import Any, cast

from runlane.model.payloads import MAX_PAYLOAD_DEPTH, UnreadablePayload, compact_encoder
from runlane.types.clock import to_micros

#: Sequence number of the ``run.delivery_requested`` event of a run created with one.
DELIVERY_REQUEST_SEQUENCE = 2

#: One encoder for every call (``json.dumps`` with options builds one per call). What
#: drivers encode is JSON-shaped already (see :func:`compact_encoder`).
_ENCODE = compact_encoder(allow_nan=True)

#: The standard decoder's scanner: ``json.loads`` of a string is this scan from
#: position 0 to the end, after a Python layer (type checks, a decoder method, two
#: whitespace regex matches) that costs a few times the scan of a short value.
_SCAN: Callable[[str, int], tuple[Any, int]] = cast(Any, json.JSONDecoder()).scan_once


def dumps(value: Any) -> str:
    """Compact JSON text."""
    return _ENCODE(value)


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


#: Bound once: decoding calls it for every row.
_loads = load_json


def load_payload(text: str | bytes) -> Any:
    """Decode a stored payload; one that cannot be decoded becomes an
    :class:`UnreadablePayload`, so it fails its own run and never the claim or
    listing that read it (rows written before payloads had a nesting cap may be
    too deep for the stack that reads them)."""
    try:
        return _loads(text)
    except (ValueError, RecursionError) as error:
        reason = (
            f"nested deeper than this process can decode (the cap is {MAX_PAYLOAD_DEPTH})"
            if isinstance(error, RecursionError)
            else "not valid JSON"
        )
        return UnreadablePayload(reason)


def load_carrier(text: str | bytes) -> Any:
    """Decode a stored trace carrier; one that cannot be read is dropped (``None``):
    a carrier is advisory, never fatal."""
    try:
        return _loads(text)
    except (ValueError, RecursionError):
        return None


def micros_or_none(moment: datetime | None) -> int | None:
    """``moment`` in storage microseconds, or ``None``."""
    return to_micros(moment) if moment is not None else None
