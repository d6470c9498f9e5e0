"""Injectable time, so maintenance, backoff and schedules are testable without sleeping."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Protocol

from runlane.types.durations import parse_duration
from runlane.types.errors import configuration_error

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
#: Built once: every stored time passes through to_micros (a timedelta with keywords
#: costs more to build than the conversion itself).
_MICROSECOND = timedelta(microseconds=1)


class Clock(Protocol):
    """A source of the current time as an aware UTC datetime."""

    def now(self) -> datetime:
        """Return the current time (UTC, timezone-aware)."""
        ...


class SystemClock:
    """The wall clock."""

    def now(self) -> datetime:
        """Return the current UTC time."""
        return datetime.now(UTC)


class ManualClock:
    """A clock that only moves when told to; for tests.

    >>> clock = ManualClock(); clock.advance("30s")
    """

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2030, 1, 1, tzinfo=UTC)
        if self._now.tzinfo is None:
            raise ValueError("ManualClock needs a timezone-aware start time")

    def now(self) -> datetime:
        """Return the clock's current time."""
        return self._now

    def advance(self, by: str | timedelta | float) -> datetime:
        """Move the clock forward by a duration and return the new time."""
        self._now += timedelta(seconds=parse_duration(by, name="advance"))
        return self._now

    def set(self, to: datetime) -> None:
        """Jump to an absolute time."""
        self._now = to


def to_micros(moment: datetime) -> int:
    """Aware datetime → integer microseconds since the Unix epoch (storage format)."""
    if moment.tzinfo is None:
        raise ValueError(f"naive datetime {moment!r}: runlane needs timezone-aware datetimes")
    return (moment - _EPOCH) // _MICROSECOND


def from_micros(value: int) -> datetime:
    """Integer microseconds since the Unix epoch → aware UTC datetime."""
    return _EPOCH + timedelta(0, 0, value)  # (days, seconds, microseconds): no keywords


def aware_utc(moment: object, *, name: str) -> datetime:
    """``moment`` (a timezone-aware datetime) in UTC, or ``CONFIGURATION_INVALID``.

    Converting first means a moment whose offset carries it past ``datetime.min`` or
    ``datetime.max`` is refused here, not met as an ``OverflowError`` later.
    """
    if not isinstance(moment, datetime) or moment.tzinfo is None:
        raise configuration_error(f"{name} must be a timezone-aware datetime, got {moment!r}.")
    try:
        offset = moment.utcoffset()
        if offset is None:
            raise configuration_error(f"{name} must be a timezone-aware datetime, got {moment!r}.")
        return moment.astimezone(UTC)
    except (OverflowError, ValueError):
        raise configuration_error(
            f"{name} {moment!r} is outside the range of datetimes once converted to UTC "
            "(years 1 to 9999); pass a realistic moment."
        ) from None
