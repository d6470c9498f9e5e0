"""Schedules at run time: materialising due slots (a tick duty) and ``rl.schedules``."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from runlane.core.store import StoreScope
from runlane.model.schedule_defs import ScheduleDef, occurrence_key
from runlane.types.errors import ErrorCode, RunlaneError
from runlane.types.records import NewRun, ScheduleOccurrence, ScheduleState
from runlane.types.runs import Run, RunSource, RunSourceType

if TYPE_CHECKING:
    from runlane.core.observing import Observers
    from runlane.model.definitions import TaskDef
    from runlane.model.queue_defs import QueueDef

logger = logging.getLogger("runlane.schedules")


@dataclass(frozen=True, slots=True)
class ScheduleInfo:
    """A schedule as operators see it."""

    id: str
    task_id: str
    kind: str
    expression: str
    timezone: str
    enabled: bool
    paused: bool
    last_fired_at: datetime | None
    next_fire_at: datetime | None


class BuildsRuns(Protocol):
    """What materialising needs from the producer: one validated run to create."""

    def build_new_run(
        self,
        task: TaskDef[Any] | str,
        payload: Any,
        *,
        source: RunSource,
        queue: QueueDef | None = None,
        run_at: datetime | None = None,
        idempotency_key: str | None = None,
        priority: int = 0,
    ) -> NewRun:
        """Validate one run; nothing is written."""
        ...


@dataclass(frozen=True, slots=True)
class ScheduleMaterializer:
    """Turns the due slots of registered schedules into runs (the ``schedules`` duty)."""

    store: StoreScope
    schedules: Mapping[str, tuple[ScheduleDef, TaskDef[Any]]]
    producer: BuildsRuns
    observers: Observers

    async def materialize_due(self) -> tuple[int, int]:
        """Create one run per due slot of every enabled, unpaused schedule.

        Returns (runs created, schedules that failed). A schedule whose slots or run
        cannot be computed is logged and skipped; the others are materialised.
        """
        if not self.schedules:
            return 0, 0
        store = self.store
        states = await store.storage.get_schedule_states(store.environment)
        now = store.now()
        occurrences: list[ScheduleOccurrence] = []
        unseen: list[str] = []
        failed = 0
        for schedule_id, (entry, task) in self.schedules.items():
            state = states.get(schedule_id)
            if not entry.enabled or (state is not None and state.paused):
                continue
            after = _starting_point(state)
            if after is None:
                # A schedule starts at its first slot after it is first seen, as cron does:
                # a deploy never fires last night's slot.
                unseen.append(schedule_id)
                continue
            try:
                occurrences.extend(self._due_occurrences(schedule_id, entry, task, after, now))
            except Exception:
                failed += 1
                logger.exception("schedule %s: due slots could not be materialised", schedule_id)
        if unseen:
            await store.storage.mark_schedules_seen(store.environment, unseen, now)
            logger.info("schedules %s: first seen; their first slot after now fires", unseen)
        if not occurrences:
            return 0, failed
        created = await self._materialize(occurrences, now)
        for run in created:
            logger.info(
                "schedule %s: run %s for %s", run.source.schedule_id, run.id, run.source.occurs_at
            )
        return len(created), failed

    async def _materialize(self, occurrences: list[ScheduleOccurrence], now: datetime) -> list[Run]:
        """Create the occurrences' runs and tell the observers; with a tracing observer,
        each task's runs inside one producer span whose context their carrier holds, as
        a trigger's runs are, so their attempts join the trace that span starts."""
        store, observers = self.store, self.observers
        if not observers.traces_producing:
            runs = await store.storage.materialize_schedule_occurrences(
                store.environment, occurrences, now
            )
            if runs and observers:
                observers.call("triggered", runs)
            return runs
        groups: dict[tuple[str, str], list[ScheduleOccurrence]] = {}
        for occurrence in occurrences:
            key = (occurrence.run.task_id, occurrence.run.queue)
            groups.setdefault(key, []).append(occurrence)
        created: list[Run] = []
        for (task_id, queue), group in groups.items():
            with observers.producing(task_id, queue, len(group)) as carrier:
                if carrier is not None:
                    group = [
                        replace(o, run=replace(o.run, trace_carrier=dict(carrier)))
                        if o.run.trace_carrier is None
                        else o
                        for o in group
                    ]
                runs = await store.storage.materialize_schedule_occurrences(
                    store.environment, group, now
                )
                if runs:
                    observers.call("triggered", runs)
                created.extend(runs)
        return created

    def _due_occurrences(
        self,
        schedule_id: str,
        entry: ScheduleDef,
        task: TaskDef[Any],
        after: datetime,
        now: datetime,
    ) -> list[ScheduleOccurrence]:
        return [
            ScheduleOccurrence(
                schedule_id,
                slot,
                self.producer.build_new_run(
                    task,
                    entry.payload,
                    queue=entry.queue,
                    run_at=slot,
                    idempotency_key=occurrence_key(schedule_id, slot),
                    priority=entry.priority,
                    source=RunSource(
                        RunSourceType.SCHEDULE, schedule_id=schedule_id, occurs_at=slot
                    ),
                ),
            )
            for slot in entry.slots_between(after, now)
        ]


def _starting_point(state: ScheduleState | None) -> datetime | None:
    """Slots after this point are due: the newest one materialised, else when first seen."""
    if state is None:
        return None
    points = [point for point in (state.last_slot, state.first_seen) if point is not None]
    return max(points, default=None)


class Schedules:
    """``rl.schedules``: list schedules with their next fire time; pause and resume them."""

    def __init__(
        self,
        store: StoreScope,
        schedules: Mapping[str, tuple[ScheduleDef, TaskDef[Any]]],
        connect: Callable[[], Awaitable[None]],
    ) -> None:
        """Report and pause the registered ``schedules`` (with their tasks, by id) in
        ``store``; ``connect`` opens the lane before storage is touched."""
        self._store = store
        self._schedules = schedules
        self._connect = connect

    async def list(self) -> list[ScheduleInfo]:
        """Every registered schedule with its state and next fire time."""
        store = self._store
        await self._connect()
        states = await store.storage.get_schedule_states(store.environment)
        now = store.now()
        items = []
        for schedule_id, (entry, task) in sorted(self._schedules.items()):
            state = states.get(schedule_id)
            paused = state.paused if state else False
            last = state.last_slot if state else None
            after = max(now, last) if last else now
            items.append(
                ScheduleInfo(
                    id=schedule_id,
                    task_id=task.id,
                    kind=_kind(entry),
                    expression=_expression(entry),
                    timezone=entry.timezone,
                    enabled=entry.enabled,
                    paused=paused,
                    last_fired_at=last,
                    next_fire_at=None
                    if paused or not entry.enabled
                    else _next_fire(schedule_id, entry, after),
                )
            )
        return items

    async def pause(self, schedule_id: str) -> ScheduleInfo:
        """Stop materialising a schedule until :meth:`resume`; survives restarts."""
        return await self._set_paused(schedule_id, True)

    async def resume(self, schedule_id: str) -> ScheduleInfo:
        """Materialise again; missed slots follow the schedule's catch-up rule."""
        return await self._set_paused(schedule_id, False)

    async def _set_paused(self, schedule_id: str, paused: bool) -> ScheduleInfo:
        store = self._store
        if schedule_id not in self._schedules:
            raise RunlaneError(
                ErrorCode.SCHEDULE_NOT_FOUND,
                f"schedule {schedule_id!r} is not registered with this runtime.",
                meta={"schedule_id": schedule_id},
            )
        await self._connect()
        await store.storage.set_schedule_paused(store.environment, schedule_id, paused, store.now())
        return next(item for item in await self.list() if item.id == schedule_id)


def _next_fire(schedule_id: str, entry: ScheduleDef, after: datetime) -> datetime | None:
    # A listing shows every schedule, even one whose next slot cannot be computed.
    try:
        return entry.next_slot_after(after)
    except Exception:
        logger.exception("schedule %s: next fire time could not be computed", schedule_id)
        return None


def _kind(entry: ScheduleDef) -> str:
    return "cron" if entry.cron else "every" if entry.every is not None else "once"


def _expression(entry: ScheduleDef) -> str:
    if entry.cron:
        return entry.cron
    if entry.every is not None:
        return f"{entry.every:g}s"
    assert entry.run_at is not None
    return entry.run_at.isoformat()
