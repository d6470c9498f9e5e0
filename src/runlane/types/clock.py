"""Injectable time, so maintenance, backoff and schedules are testable without sleeping."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from typing import NamedTuple, Protocol

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


class ClockReading(NamedTuple):
    """One reading of a server's clock: the host's monotonic time when the request was
    sent (``sent``) and when the answer came (``received``), and the server's time."""

    sent: float
    received: float
    server_now: datetime

    @property
    def round_trip(self) -> float:
        """Seconds between request and answer: the reading is off by at most half."""
        return self.received - self.sent


class ServerClock:
    """A database server's time, on this host: the server's time at its best reading
    plus the host's monotonic time elapsed since.

    Every comparison of "now" with stored times then follows the server's clock, as a
    statement using SQL ``now()`` would, while statements keep taking "now" as a
    parameter. The host's wall clock plays no part once a reading is taken, so a host
    clock that is set wrong, or stepped while running, changes nothing. A reading is
    off by at most half its round trip (the best of a few is kept), and the monotonic
    clock's rate error (NTP slews it to true time; a few hundred parts per million at
    worst) adds under 30 ms over the minute between readings. Until the first reading
    it is the host's wall clock.

    >>> clock = ServerClock(); clock.update([ClockReading(sent, received, server_now)])
    """

    def __init__(self, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._monotonic = monotonic
        self._reference: datetime | None = None
        self._read_at = 0.0
        #: Server time minus host wall time at the last reading, in seconds (None before).
        self.offset: float | None = None
        #: Round trip of the reading in use, in seconds (None before the first).
        self.uncertainty: float | None = None

    def now(self) -> datetime:
        """The server's current time (the host's before the first reading)."""
        reference = self._reference
        if reference is None:
            return datetime.now(UTC)
        # (days, seconds): positional, as a keyword timedelta costs more to build.
        return reference + timedelta(0, self._monotonic() - self._read_at)

    def update(self, readings: Iterable[ClockReading], *, host_now: datetime | None = None) -> None:
        """Run on the best (shortest round trip) of ``readings``; ``host_now`` (default:
        the host's wall clock now) sets :attr:`offset`."""
        best = min(readings, key=lambda reading: reading.round_trip, default=None)
        if best is None:
            return
        midpoint = (best.sent + best.received) / 2
        # In UTC: a server in another time zone hands its zone over, and adding to a
        # zoned datetime is wall-clock arithmetic (off by an hour across a DST change).
        self._reference = best.server_now.astimezone(UTC)
        self._read_at = midpoint
        self.uncertainty = best.round_trip
        host = host_now if host_now is not None else datetime.now(UTC)
        elapsed = self._monotonic() - midpoint
        self.offset = (best.server_now - host).total_seconds() + elapsed


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
