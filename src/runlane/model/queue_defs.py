"""Queue definitions: a name and its durable policy."""

from __future__ import annotations

from dataclasses import dataclass

from runlane.types.durations import Duration, parse_optional_duration
from runlane.types.errors import configuration_error
from runlane.types.ids import validate_identifier
from runlane.types.priorities import parse_priority_window
from runlane.types.rate_limits import RateLimit, parse_rate_limit

#: The one partitioning of a rate limit besides the whole queue: each run's rate key.
RATE_LIMIT_BY_KEY = "key"
#: The rate key of runs without one on a queue limited per key (and the partition of a
#: queue limited as a whole).
UNKEYED = ""


@dataclass(frozen=True, slots=True, init=False)
class QueueDef:
    """A named queue and its durable policy. Build it with :func:`queue`."""

    name: str
    default: bool
    concurrency_limit: int | None
    dispatch_timeout: float | None
    #: Attempt starts allowed per period, fleet-wide, per partition (None: unlimited).
    rate_limit: RateLimit | None
    #: ``"key"``: each run's ``rate_key`` is its own partition; None: the whole queue.
    rate_limit_by: str | None
    #: Seconds a priority-10 run goes ahead of a priority-0 run due at the same time.
    priority_window: float

    def __init__(
        self,
        name: str,
        *,
        default: bool = False,
        concurrency_limit: int | None = None,
        dispatch_timeout: Duration | None = None,
        rate_limit: RateLimit | str | None = None,
        rate_limit_by: str | None = None,
        priority_window: Duration | None = None,
    ) -> None:
        validate_identifier(name, name="queue name")
        window = parse_priority_window(priority_window, queue=name)
        if concurrency_limit is not None and (
            isinstance(concurrency_limit, bool)
            or not isinstance(concurrency_limit, int)
            or concurrency_limit < 1
        ):
            raise configuration_error(
                f"queue {name!r}: concurrency_limit must be a whole number of at least 1."
            )
        if dispatch_timeout is not None and concurrency_limit is None:
            raise configuration_error(
                f"queue {name!r}: dispatch_timeout needs concurrency_limit "
                "(it bounds how long reserved capacity may sit unclaimed)."
            )
        limit = parse_rate_limit(rate_limit)
        if rate_limit_by is not None and rate_limit_by != RATE_LIMIT_BY_KEY:
            raise configuration_error(
                f"queue {name!r}: rate_limit_by must be {RATE_LIMIT_BY_KEY!r} or None."
            )
        if rate_limit_by is not None and limit is None:
            raise configuration_error(f"queue {name!r}: rate_limit_by needs a rate_limit.")
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "default", bool(default))
        object.__setattr__(self, "rate_limit", limit)
        object.__setattr__(self, "rate_limit_by", rate_limit_by)
        object.__setattr__(self, "concurrency_limit", concurrency_limit)
        object.__setattr__(self, "priority_window", window)
        object.__setattr__(
            self,
            "dispatch_timeout",
            parse_optional_duration(dispatch_timeout, name="dispatch_timeout", allow_zero=False),
        )


def queue(
    name: str,
    *,
    default: bool = False,
    concurrency_limit: int | None = None,
    dispatch_timeout: Duration | None = None,
    rate_limit: RateLimit | str | None = None,
    rate_limit_by: str | None = None,
    priority_window: Duration | None = None,
) -> QueueDef:
    """Define a queue.

    ``rate_limit`` (``"10/s"``, ``"100/m"``, ``"N/h"``, ``"N/d"`` or a
    :class:`~runlane.RateLimit`) limits how many attempts start per period across
    every worker; with ``rate_limit_by="key"`` each run's ``rate_key`` gets its own
    limit. Bad values raise ``CONFIGURATION_INVALID`` here.

    ``priority_window`` (default five minutes, 1 s to 1 day) bounds what a run's
    ``priority`` buys: a priority-10 run goes before priority-0 runs that have been
    due for less than the window, and no due run waits behind runs that became due
    more than twice the window after it.

    >>> main = queue("main", default=True)
    >>> invoices = queue("invoice_sync", concurrency_limit=1, dispatch_timeout="2m")
    >>> partner = queue("partner_api", rate_limit="10/s")
    >>> tenants = queue("tenant_sync", rate_limit="100/m", rate_limit_by="key")
    >>> reports = queue("reports", priority_window="10m")
    """
    return QueueDef(
        name,
        default=default,
        concurrency_limit=concurrency_limit,
        dispatch_timeout=dispatch_timeout,
        rate_limit=rate_limit,
        rate_limit_by=rate_limit_by,
        priority_window=priority_window,
    )
