"""Identifiers: validation of user-chosen ids and generation of run ids."""

from __future__ import annotations

import os
import threading
import time

from runlane.types.errors import configuration_error
from runlane.types.storable_text import unstorable

MAX_IDENTIFIER_LENGTH = 255


def validate_identifier(value: object, *, name: str) -> str:
    """Return ``value`` if it is a valid identifier (non-empty, no ``:``), else raise."""
    if not isinstance(value, str) or not value.strip():
        raise configuration_error(f"{name} must be a non-empty string, got {value!r}.")
    problem = unstorable(value)
    if problem is not None:
        raise configuration_error(f"{name} must not contain {problem}.")
    if ":" in value:
        raise configuration_error(f"{name} {value!r} must not contain ':' (reserved by storage).")
    if len(value) > MAX_IDENTIFIER_LENGTH:
        raise configuration_error(f"{name} is longer than {MAX_IDENTIFIER_LENGTH} characters.")
    return value


def could_be_run_id(value: object) -> bool:
    """Whether storage could hold a run with id ``value``.

    Run ids are made by the runtime, so anything storage cannot keep (NUL, a lone
    surrogate, over-long text) names no run: callers answer "not found" without
    asking storage, which would fail to encode it (an outage on one lane, a raw
    ``UnicodeEncodeError`` on the other).
    """
    return (
        isinstance(value, str)
        and 0 < len(value) <= MAX_IDENTIFIER_LENGTH
        and unstorable(value) is None
    )


def validate_optional_identifier(value: object | None, *, name: str) -> str | None:
    """Like :func:`validate_identifier`, passing ``None`` through."""
    return None if value is None else validate_identifier(value, name=name)


_MILLIS_MASK = (1 << 48) - 1
#: Ids whose random bits one draw of :meth:`_MonotonicUuid7.__call__`'s pool covers.
_POOL_IDS = 512
#: Hex digits one lone id takes from the pool: a counter seed byte, then 8 bytes of tail.
_ID_DRAW = 18
#: The first hex digit of the random tail with the RFC 9562 variant bits (``10``) set.
_VARIANT_DIGIT = {digit: "89ab"[int(digit, 16) & 0b11] for digit in "0123456789abcdef"}
#: A random tail's first byte with the variant bits set (``bytes.translate`` table).
_VARIANT_BYTES = bytes(0x80 | (byte & 0x3F) for byte in range(256))
#: Each 12-bit counter as its three hex digits.
_COUNTER_HEX = [f"{n:03x}" for n in range(0x1000)]


class _MonotonicUuid7:
    """UUIDv7 ids that sort in creation order within this process, even within a millisecond.

    The 12-bit ``rand_a`` field is a counter that restarts at a random low value
    each new millisecond (RFC 9562, method 1); on overflow the timestamp moves on.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._millis = 0
        self._counter = 0
        # Lone ids draw their random bits from a pool (as hex), one system call per
        # _POOL_IDS ids instead of one each; a forked child starts a pool of its own.
        self._pool = ""
        self._used = 0
        self._head_millis = -1
        self._head = ""

    def __call__(self) -> str:
        """One new id (a lone trigger's): what :meth:`many` makes, without its lists."""
        with self._lock:
            used = self._used
            if used >= len(self._pool):
                self._pool, used = os.urandom(_ID_DRAW // 2 * _POOL_IDS).hex(), 0
            drawn = self._pool[used : used + _ID_DRAW]
            self._used = used + _ID_DRAW
            millis, counter = self._millis, self._counter
            now = time.time_ns() // 1_000_000
            if now > millis:
                millis, counter = now, int(drawn[:2], 16) - 1
            counter += 1
            if counter > 0xFFF:
                millis, counter = millis + 1, 0
            self._millis, self._counter = millis, counter
            if millis != self._head_millis:
                stamp = f"{millis & _MILLIS_MASK:012x}"
                self._head_millis, self._head = millis, f"{stamp[:8]}-{stamp[8:]}-7"
            head = self._head
        return f"{head}{counter:03x}-{_VARIANT_DIGIT[drawn[2]]}{drawn[3:6]}-{drawn[6:]}"

    def forget_pool(self) -> None:
        """Drop the drawn random bits and the lock (in a forked child: the parent's
        pool would repeat the parent's ids)."""
        self._lock = threading.Lock()
        self._pool, self._used = "", 0

    def many(self, count: int) -> list[str]:
        """``count`` new ids in order (one clock read and one random draw for all)."""
        # One draw: a counter seed for a new millisecond, then each id's random tail.
        drawn = os.urandom(1 + 8 * count)
        # Stretches of ids sharing a millisecond: (millis, first counter, how many).
        stretches: list[tuple[int, int, int]] = []
        with self._lock:
            millis, counter = self._millis, self._counter
            now = time.time_ns() // 1_000_000
            if now > millis:
                millis, counter = now, drawn[0] - 1
            remaining = count
            while remaining:
                if counter >= 0xFFF:
                    millis, counter = millis + 1, -1
                taken = min(remaining, 0xFFF - counter)
                stretches.append((millis, counter + 1, taken))
                counter += taken
                remaining -= taken
            self._millis, self._counter = millis, counter
        # Every tail's variant bits set in one pass over the bytes, then all of them
        # formatted as hex at once: each id is then slices of one string.
        tails = bytearray(drawn[1:])
        tails[0::8] = tails[0::8].translate(_VARIANT_BYTES)
        randomness = tails.hex()
        counters = _COUNTER_HEX
        ids: list[str] = []
        offset = 0
        for millis, first, taken in stretches:
            stamp = f"{millis & _MILLIS_MASK:012x}"
            head = f"{stamp[:8]}-{stamp[8:]}-7"
            ids += [
                f"{head}{counters[n]}-{randomness[at : at + 4]}-{randomness[at + 4 : at + 16]}"
                for n, at in zip(
                    range(first, first + taken), range(offset, offset + 16 * taken, 16), strict=True
                )
            ]
            offset += 16 * taken
        return ids


new_run_id = _MonotonicUuid7()
"""A new run id: a UUIDv7 string, time-ordered so listings sort by creation.
``new_run_id.many(n)`` makes ``n`` at once."""
if hasattr(os, "register_at_fork"):  # not on Windows, which does not fork
    os.register_at_fork(after_in_child=new_run_id.forget_pool)


def new_token() -> str:
    """An unguessable token, used as a lease fencing token."""
    return os.urandom(12).hex()
