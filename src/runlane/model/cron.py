"""Cron expressions: the one module that talks to croniter.

Everything else asks this module, so replacing the cron library (or pinning
another version of it) touches one file.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

from croniter import croniter

#: Runlane accepts classic five-field expressions (minute hour day month weekday).
CRON_FIELDS = 5


def is_valid_cron(expression: object) -> bool:
    """Whether ``expression`` is a valid five-field cron expression.

    >>> is_valid_cron("0 3 * * *"), is_valid_cron("0 3 * * * *")
    (True, False)
    """
    return (
        isinstance(expression, str)
        and len(expression.split()) == CRON_FIELDS
        and bool(croniter.is_valid(expression))
    )


#: A start date for the probe in :func:`ever_fires`; any ordinary date serves.
_PROBE_START = datetime(2000, 1, 1)


def ever_fires(expression: str) -> bool:
    """Whether a valid ``expression`` matches any date at all (``0 0 30 2 *`` matches none:
    croniter raises on every walk over its slots)."""
    try:
        croniter(expression, _PROBE_START).get_next(datetime)
        croniter(expression, _PROBE_START).get_prev(datetime)
    except Exception:
        return False
    return True


def wall_times_after(expression: str, start: datetime) -> Iterator[datetime]:
    """Naive wall-clock times matching ``expression`` strictly after naive ``start``,
    oldest first."""
    iterator = croniter(expression, start)
    while True:
        yield iterator.get_next(datetime)


def wall_times_before(expression: str, start: datetime) -> Iterator[datetime]:
    """Naive wall-clock times matching ``expression`` strictly before naive ``start``,
    newest first."""
    iterator = croniter(expression, start)
    while True:
        yield iterator.get_prev(datetime)
