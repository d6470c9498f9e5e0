"""Values as SQL drivers store them: compact JSON text, and times as integer
microseconds since the Unix epoch. Payloads and trace carriers that cannot be
decoded never fail the read that found them."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from runlane.model.payloads import MAX_PAYLOAD_DEPTH, UnreadablePayload, compact_encoder
from runlane.types.carriers import load_carrier as load_carrier
from runlane.types.clock import to_micros
from runlane.types.json_text import load_json as load_json

#: Sequence number of the ``run.delivery_requested`` event of a run created with one.
DELIVERY_REQUEST_SEQUENCE = 2

#: One encoder for every call (``json.dumps`` with options builds one per call). What
#: drivers encode is JSON-shaped already (see :func:`compact_encoder`).
_ENCODE = compact_encoder(allow_nan=True)


def dumps(value: Any) -> str:
    """Compact JSON text."""
    return _ENCODE(value)


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


def micros_or_none(moment: datetime | None) -> int | None:
    """``moment`` in storage microseconds, or ``None``."""
    return to_micros(moment) if moment is not None else None
