"""Queue definitions: a name and its durable policy."""

from __future__ import annotations

from dataclasses import dataclass

from runlane.types.durations import Duration, parse_optional_duration
from runlane.types.errors import configuration_error
from runlane.types.ids import validate_identifier


@dataclass(frozen=True, slots=True, init=False)
class QueueDef:
    """A named queue and its durable policy. Build it with :func:`queue`."""

    name: str
    default: bool
    concurrency_limit: int | None
    dispatch_timeout: float | None

    def __init__(
        self,
        name: str,
        *,
        default: bool = False,
        concurrency_limit: int | None = None,
        dispatch_timeout: Duration | None = None,
    ) -> None:
        validate_identifier(name, name="queue name")
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
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "default", bool(default))
        object.__setattr__(self, "concurrency_limit", concurrency_limit)
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
) -> QueueDef:
    """Define a queue.

    >>> main = queue("main", default=True)
    >>> invoices = queue("invoice_sync", concurrency_limit=1, dispatch_timeout="2m")
    """
    return QueueDef(
        name,
        default=default,
        concurrency_limit=concurrency_limit,
        dispatch_timeout=dispatch_timeout,
    )
