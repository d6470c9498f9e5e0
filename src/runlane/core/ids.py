"""Identifiers: validation of user-chosen ids and generation of run ids."""

from __future__ import annotations

import os
import threading
import time

from runlane.core.errors import configuration_error

MAX_IDENTIFIER_LENGTH = 255


def validate_identifier(value: object, *, name: str) -> str:
    """Return ``value`` if it is a valid identifier (non-empty, no ``:``), else raise."""
    if not isinstance(value, str) or not value.strip():
        raise configuration_error(f"{name} must be a non-empty string, got {value!r}.")
    if ":" in value:
        raise configuration_error(f"{name} {value!r} must not contain ':' (reserved by storage).")
    if len(value) > MAX_IDENTIFIER_LENGTH:
        raise configuration_error(f"{name} is longer than {MAX_IDENTIFIER_LENGTH} characters.")
    return value


def validate_optional_identifier(value: object | None, *, name: str) -> str | None:
    """Like :func:`validate_identifier`, passing ``None`` through."""
    return None if value is None else validate_identifier(value, name=name)


class _MonotonicUuid7:
    """UUIDv7 ids that sort in creation order within this process, even within a millisecond.

    The 12-bit ``rand_a`` field is a counter that restarts at a random low value
    each new millisecond (RFC 9562, method 1); on overflow the timestamp moves on.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._millis = 0
        self._counter = 0

    def __call__(self) -> str:
        with self._lock:
            millis = time.time_ns() // 1_000_000
            if millis > self._millis:
                self._millis, self._counter = millis, int.from_bytes(os.urandom(1), "big")
            else:
                self._counter += 1
                if self._counter > 0xFFF:
                    self._millis, self._counter = self._millis + 1, 0
            millis, counter = self._millis, self._counter
        tail = int.from_bytes(os.urandom(8), "big") & ((1 << 62) - 1)
        value = (millis & ((1 << 48) - 1)) << 80 | 0x7 << 76 | counter << 64 | 0b10 << 62 | tail
        hex_ = f"{value:032x}"
        return f"{hex_[:8]}-{hex_[8:12]}-{hex_[12:16]}-{hex_[16:20]}-{hex_[20:]}"


new_run_id = _MonotonicUuid7()
"""A new run id: a UUIDv7 string, time-ordered so listings sort by creation."""


def new_token() -> str:
    """An unguessable token, used as a lease fencing token."""
    return os.urandom(12).hex()
