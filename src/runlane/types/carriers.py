"""Trace carriers: the trace context a producer hands over with a run or a message."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from runlane.types.errors import configuration_error
from runlane.types.json_text import load_json
from runlane.types.storable_text import unstorable

#: The most bytes (UTF-8 keys plus values) a trace carrier may hold; W3C trace context
#: and baggage fit in far less, and the carrier goes into every wakeup.
MAX_TRACE_CARRIER_BYTES = 4096


def validate_trace_carrier(carrier: Mapping[str, str] | None) -> dict[str, str] | None:
    """Return the carrier as a plain dict, or raise ``CONFIGURATION_INVALID``."""
    if carrier is None:
        return None
    if not isinstance(carrier, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in carrier.items()
    ):
        raise configuration_error("trace_carrier must map strings to strings.")
    size = 0
    for text in (*carrier.keys(), *carrier.values()):
        problem = unstorable(text)
        if problem is not None:
            raise configuration_error(f"trace_carrier must not contain {problem}.")
        size += len(text.encode())
    if size > MAX_TRACE_CARRIER_BYTES:
        # It travels in every wakeup: an oversized one would make the provider refuse
        # the batch it is published with.
        raise configuration_error(
            f"trace_carrier holds {size} bytes of keys and values; at most "
            f"{MAX_TRACE_CARRIER_BYTES} are allowed (propagate trace context only).",
            size=size,
            limit=MAX_TRACE_CARRIER_BYTES,
        )
    return dict(carrier)


def load_carrier(text: str | bytes) -> Any:
    """Decode a stored trace carrier; one that cannot be read is dropped (``None``):
    a carrier is advisory, never fatal."""
    try:
        return load_json(text)
    except (ValueError, RecursionError):
        return None
