"""Identifiers: validation of user-chosen ids and generation of run ids."""

from __future__ import annotations

import os
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


def new_run_id() -> str:
    """A UUIDv7-shaped id: time-ordered (so pages sort by creation) and unique."""
    millis = time.time_ns() // 1_000_000
    rand = int.from_bytes(os.urandom(10), "big")
    value = (millis & ((1 << 48) - 1)) << 80 | 0x7 << 76 | (rand >> 4) & ((1 << 76) - 1)
    value = (value & ~(0x3 << 62)) | (0x2 << 62)
    hex_ = f"{value:032x}"
    return f"{hex_[:8]}-{hex_[8:12]}-{hex_[12:16]}-{hex_[16:20]}-{hex_[20:]}"


def new_token() -> str:
    """An unguessable token, used as a lease fencing token."""
    return os.urandom(12).hex()
