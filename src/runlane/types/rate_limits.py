"""Rate limits (SPEC-flow 7.1): how many attempts of one partition may start per period.

A value type with its parser; the token arithmetic is in ``runlane.model.rate_limiting``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from runlane.types.durations import Duration, parse_duration
from runlane.types.errors import configuration_error

#: Shortest and longest period of a rate limit, in seconds.
MIN_PERIOD = 1.0
MAX_PERIOD = 86_400.0
_UNITS = {"s": 1.0, "m": 60.0, "h": 3_600.0, "d": 86_400.0}
_SHORT = re.compile(r"^\s*(\d+)\s*/\s*([smhd])\s*$")


@dataclass(frozen=True, slots=True, init=False)
class RateLimit:
    """At most ``count`` attempt starts per ``per`` of one partition, after an idle
    partition's ``burst`` (the bucket's capacity, 1 to ``count``).

    >>> RateLimit(60, per="1m", burst=10)
    RateLimit(count=60, per=60.0, burst=10)
    """

    count: int
    per: float
    burst: int

    def __init__(self, count: int, per: Duration = "1s", burst: int = 1) -> None:
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise configuration_error("a rate limit's count must be a whole number of at least 1.")
        seconds = parse_duration(per, name="rate limit period", allow_zero=False)
        if not MIN_PERIOD <= seconds <= MAX_PERIOD:
            raise configuration_error("a rate limit's period must be between 1 s and 1 day.")
        if isinstance(burst, bool) or not isinstance(burst, int) or not 1 <= burst <= count:
            raise configuration_error(
                f"a rate limit's burst must be a whole number from 1 to its count ({count})."
            )
        object.__setattr__(self, "count", count)
        object.__setattr__(self, "per", seconds)
        object.__setattr__(self, "burst", burst)

    def __str__(self) -> str:
        unit = next((u for u, s in _UNITS.items() if s == self.per), None)
        text = f"{self.count}/{unit}" if unit else f"{self.count} per {self.per:g}s"
        return text if self.burst == 1 else f"{text} (burst {self.burst})"

    @property
    def interval_micros(self) -> int:
        """Microseconds between two tokens (the emission interval), at least 1."""
        return max(1, round(self.per * 1_000_000 / self.count))


def parse_rate_limit(value: object) -> RateLimit | None:
    """``"N/s"``, ``"N/m"``, ``"N/h"``, ``"N/d"``, a :class:`RateLimit` or ``None``;
    anything else raises ``CONFIGURATION_INVALID``."""
    if value is None or isinstance(value, RateLimit):
        return value
    if isinstance(value, str):
        match = _SHORT.match(value)
        if match is None:
            raise configuration_error(
                f"rate limit {value!r} is not 'N/s', 'N/m', 'N/h' or 'N/d' (or a RateLimit)."
            )
        return RateLimit(int(match.group(1)), per=_UNITS[match.group(2)])
    raise configuration_error("a rate limit must be a string such as '10/s' or a RateLimit.")
