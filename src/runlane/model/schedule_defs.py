"""Schedule definitions and slot arithmetic (pure functions over datetimes)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from runlane.model.cron import ever_fires, is_valid_cron, wall_times_after, wall_times_before
from runlane.model.payloads import prepare_payload
from runlane.model.queue_defs import QueueDef
from runlane.types.clock import aware_utc
from runlane.types.durations import Duration, parse_duration
from runlane.types.errors import RunlaneError, configuration_error
from runlane.types.ids import MAX_IDENTIFIER_LENGTH, validate_identifier
from runlane.types.priorities import DEFAULT_PRIORITY, validate_priority

if TYPE_CHECKING:
    from runlane.model.definitions import TaskDef

#: With ``catch_up=True`` at most this many missed slots are materialised per tick.
MAX_CATCH_UP_SLOTS = 100

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def occurrence_key(schedule_id: str, slot: datetime) -> str:
    """The idempotency key of one slot's run: replaying a tick cannot duplicate it."""
    return f"schedule.{schedule_id}.{int(slot.timestamp() * 1000)}"


#: The longest schedule id whose occurrence keys (for any slot a datetime can hold)
#: still fit in an idempotency key.
MAX_SCHEDULE_ID_LENGTH = MAX_IDENTIFIER_LENGTH - max(
    len(occurrence_key("", moment))
    for moment in (datetime.min.replace(tzinfo=UTC), datetime.max.replace(tzinfo=UTC))
)
#: Cron walks start this far beyond the moment asked about: DST shifts wall time by
#: at most a few hours, and slots outside the window are skipped anyway.
_DST_MARGIN = timedelta(hours=3)


@dataclass(frozen=True, eq=False)
class ScheduleDef:
    """A recurring (cron, every) or one-off (run_at) trigger of a task.

    Build it with :func:`schedule`.
    """

    id: str
    cron: str | None
    every: float | None
    run_at: datetime | None
    timezone: str
    payload: Any
    queue: QueueDef | None
    enabled: bool
    catch_up: bool
    #: The priority of the runs the schedule creates (-10 to 10).
    priority: int = DEFAULT_PRIORITY

    def validate_for(self, task: TaskDef[Any], max_payload_bytes: int = sys.maxsize) -> None:
        """Check the static payload against the task's schema (and that storage can keep
        it) at definition time, not at every tick; ``Runlane(...)`` checks it again
        against its own size cap."""
        try:
            prepare_payload(task, self.payload, max_payload_bytes)
        except RunlaneError as error:
            raise configuration_error(
                f"schedule {self.id!r}: its payload does not fit task {task.id!r}: {error.message}",
                schedule_id=self.id,
                reason=error.code.value,
            ) from None

    @property
    def zone(self) -> ZoneInfo:
        """The schedule's time zone."""
        return ZoneInfo(self.timezone)

    def slots_between(self, after: datetime, until: datetime) -> list[datetime]:
        """Slots in ``(after, until]`` oldest first.

        ``after`` is the newest slot materialised, or the moment a tick first saw the
        schedule: no slot before that point is ever due. Without ``catch_up`` only
        the latest slot is returned; with it, at most :data:`MAX_CATCH_UP_SLOTS` of
        the most recent ones.
        """
        if self.run_at is not None:
            return [self.run_at] if after < self.run_at <= until else []
        latest = self.latest_slot_at_or_before(until)
        if latest is None or latest <= after:
            return []
        if not self.catch_up:
            return [latest]
        slots: list[datetime] = []
        for slot in self._slots_descending(until):
            if slot <= after or len(slots) >= MAX_CATCH_UP_SLOTS:
                break
            slots.append(slot)
        return sorted(slots)

    def latest_slot_at_or_before(self, moment: datetime) -> datetime | None:
        """The newest slot not later than ``moment``."""
        if self.run_at is not None:
            return self.run_at if self.run_at <= moment else None
        return next(self._slots_descending(moment), None)

    def next_slot_after(self, moment: datetime) -> datetime | None:
        """The first slot strictly after ``moment`` (the next fire time)."""
        if self.run_at is not None:
            return self.run_at if self.run_at > moment else None
        if self.every is not None:
            step = timedelta(seconds=self.every)
            count = (moment - _EPOCH) // step
            return _EPOCH + step * (count + 1)
        assert self.cron is not None
        # Start early: around a repeated (fall-back) hour the wall clock runs backwards.
        local = (moment - _DST_MARGIN).astimezone(self.zone).replace(tzinfo=None)
        for wall in wall_times_after(self.cron, local):
            candidate = _wall_to_utc(wall, self.zone)
            if candidate > moment:
                return candidate
        return None  # pragma: no cover - a valid cron expression never runs out of slots

    def _slots_descending(self, moment: datetime) -> Iterator[datetime]:
        if self.every is not None:
            step = timedelta(seconds=self.every)
            slot = _EPOCH + step * ((moment - _EPOCH) // step)
            while True:
                yield slot
                slot -= step
        assert self.cron is not None
        zone = self.zone
        # Iterate in wall-clock time so a daily 03:00 stays at 03:00 across DST; a
        # wall time that occurs twice fires once, one that does not exist fires at
        # the first valid instant after it.
        local = (moment + _DST_MARGIN).astimezone(zone).replace(tzinfo=None)
        previous: datetime | None = None
        for wall in wall_times_before(self.cron, local):
            slot = _wall_to_utc(wall, zone)
            if slot > moment or (previous is not None and slot >= previous):
                continue
            previous = slot
            yield slot


def _check_cron_fires(schedule_id: str, cron: str) -> None:
    """Refuse a valid expression that matches no date (``0 0 30 2 *``): every walk over
    its slots would raise, at every tick and in every listing."""
    if not ever_fires(cron):
        raise configuration_error(
            f"schedule {schedule_id!r}: cron {cron!r} never fires (no date matches it); "
            "check the day-of-month and month fields.",
            cron=cron,
        )


def _wall_to_utc(wall: datetime, zone: ZoneInfo) -> datetime:
    utc = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
    if utc.astimezone(zone).replace(tzinfo=None) == wall:
        return utc
    # The wall time does not exist (spring forward): fire at the jump, the first
    # instant whose wall time is not earlier than the one asked for.
    low, high = sorted((utc, wall.replace(tzinfo=zone, fold=1).astimezone(UTC)))
    while high - low > timedelta(microseconds=1):
        middle = low + (high - low) / 2
        if middle.astimezone(zone).replace(tzinfo=None) >= wall:
            high = middle
        else:
            low = middle
    # Zone transitions fall on whole seconds; drop the bisection's last microsecond.
    return high.replace(microsecond=0)


def schedule(
    id: str,
    *,
    cron: str | None = None,
    every: Duration | None = None,
    run_at: datetime | None = None,
    timezone: str = "UTC",
    payload: Any = None,
    queue: QueueDef | None = None,
    enabled: bool = True,
    catch_up: bool = False,
    priority: int = DEFAULT_PRIORITY,
) -> ScheduleDef:
    """Define a schedule; attach it with ``task(..., schedules=[...])``.

    Exactly one of ``cron`` (five fields, in ``timezone``), ``every`` (a duration;
    slots are multiples of it since the Unix epoch) or ``run_at`` (one occurrence).
    ``priority`` (-10 to 10) is given to every run the schedule creates.

    >>> schedule("invoices.nightly", cron="0 3 * * *", timezone="Europe/Berlin")
    """
    validate_identifier(id, name="schedule id")
    if len(id) > MAX_SCHEDULE_ID_LENGTH:
        raise configuration_error(
            f"schedule id {id[:40]!r}... is longer than {MAX_SCHEDULE_ID_LENGTH} characters: "
            "its runs' idempotency keys would not fit; choose a shorter id.",
            length=len(id),
        )
    given = [
        name
        for name, value in (("cron", cron), ("every", every), ("run_at", run_at))
        if value is not None
    ]
    if len(given) != 1:
        raise configuration_error(
            f"schedule {id!r} needs exactly one of cron, every or run_at (got {given or 'none'})."
        )
    try:
        ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError, TypeError):
        raise configuration_error(f"schedule {id!r}: unknown time zone {timezone!r}.") from None
    if cron is not None and not is_valid_cron(cron):
        raise configuration_error(
            f"schedule {id!r}: {cron!r} is not a valid five-field cron expression."
        )
    if cron is not None:
        _check_cron_fires(id, cron)
    every_s = None if every is None else parse_duration(every, name="every", allow_zero=False)
    run_at_utc = None if run_at is None else aware_utc(run_at, name=f"schedule {id!r}: run_at")
    if queue is not None and not isinstance(queue, QueueDef):
        raise configuration_error(f"schedule {id!r}: queue must be a queue(...) definition.")
    validate_priority(priority, name=f"schedule {id!r}: priority")
    return ScheduleDef(
        id=id,
        cron=cron,
        every=every_s,
        run_at=run_at_utc,
        timezone=timezone,
        payload=payload,
        queue=queue,
        enabled=bool(enabled),
        catch_up=bool(catch_up),
        priority=priority,
    )
