"""Schedules: occurrences materialised once per slot."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from runlane import (
    Context,
    ErrorCode,
    ManualClock,
    RunlaneError,
    TaskDef,
    schedule,
    task,
)
from runlane.testing import drain
from runlane.testing.conformance.storage.support import (
    Factory,
    Order,
    _all_runs,
)
from runlane.types.runs import RunSourceType


def _every_minute_task(catch_up: bool = False) -> tuple[list[Any], TaskDef[Any]]:
    slots: list[Any] = []

    @task(
        "reports.minutely",
        schema=Order,
        schedules=[
            schedule("reports.every-minute", every="1m", payload={"order_id": 1}, catch_up=catch_up)
        ],
    )
    async def minutely(payload: Order, ctx: Context) -> None:
        slots.append(ctx.scheduled_for)

    return slots, minutely


async def test_tick_materialises_each_due_slot_exactly_once(make_runtime: Factory) -> None:
    clock = ManualClock(datetime(2030, 1, 1, 12, 0, 30, tzinfo=UTC))
    slots, minutely = _every_minute_task()
    rl = await make_runtime([minutely], clock=clock)
    await rl.tick()  # first seen at 12:00:30
    clock.advance("1m")
    assert (await rl.tick()).schedules_materialized == 1
    assert (await rl.tick()).schedules_materialized == 0
    (run,) = await _all_runs(rl)
    assert run.source.type is RunSourceType.SCHEDULE
    assert run.source.schedule_id == "reports.every-minute"
    assert run.source.occurs_at == datetime(2030, 1, 1, 12, 1, tzinfo=UTC)
    assert run.idempotency_key is not None and run.payload == {"order_id": 1, "note": ""}
    await drain(rl)
    assert slots == [datetime(2030, 1, 1, 12, 1, tzinfo=UTC)]
    clock.advance("1m")
    assert (await rl.tick()).schedules_materialized == 1
    assert len(await _all_runs(rl)) == 2


async def test_a_schedule_fires_no_slot_from_before_it_was_first_seen(
    make_runtime: Factory,
) -> None:
    clock = ManualClock(datetime(2030, 1, 1, 12, 0, 30, tzinfo=UTC))
    _, minutely = _every_minute_task(catch_up=True)
    rl = await make_runtime([minutely], clock=clock)
    assert (await rl.tick()).schedules_materialized == 0
    assert (await rl.tick()).schedules_materialized == 0
    (info,) = await rl.schedules.list()
    assert info.last_fired_at is None
    assert info.next_fire_at == datetime(2030, 1, 1, 12, 1, tzinfo=UTC)
    clock.advance("1m")
    assert (await rl.tick()).schedules_materialized == 1
    (run,) = await _all_runs(rl)
    assert run.source.occurs_at == datetime(2030, 1, 1, 12, 1, tzinfo=UTC)


async def test_a_schedule_added_later_starts_after_it_is_first_seen_not_with_the_others(
    make_runtime: Factory,
) -> None:
    clock = ManualClock(datetime(2030, 1, 1, 12, 0, 30, tzinfo=UTC))
    _, minutely = _every_minute_task(catch_up=True)
    first = await make_runtime([minutely], clock=clock)
    await first.tick()
    clock.advance("10m")

    @task("reports.often", schedules=[schedule("reports.five-minutely", every="5m", catch_up=True)])
    async def often(payload: Any, ctx: Context) -> None:
        return None

    # A deploy adds a schedule: the old one catches up, the new one starts from now.
    deployed = await make_runtime([minutely, often], clock=clock)
    assert (await deployed.tick()).schedules_materialized == 10
    clock.advance("5m")
    assert (await deployed.tick()).schedules_materialized == 6
    new_slots = [
        r.source.occurs_at
        for r in await _all_runs(deployed)
        if r.source.schedule_id == "reports.five-minutely"
    ]
    assert new_slots == [datetime(2030, 1, 1, 12, 15, tzinfo=UTC)]


async def test_concurrent_first_ticks_keep_the_earliest_first_seen_point(
    make_runtime: Factory,
) -> None:
    clock = ManualClock(datetime(2030, 1, 1, 12, 0, 30, tzinfo=UTC))
    _, minutely = _every_minute_task(catch_up=True)
    runtimes = [await make_runtime([minutely], clock=clock) for _ in range(3)]
    reports = await asyncio.gather(*(rl.tick() for rl in runtimes))
    assert sum(r.schedules_materialized for r in reports) == 0
    later = await make_runtime([minutely], clock=clock)
    await later.storage.mark_schedules_seen(
        later.environment, ["reports.every-minute"], clock.now() + timedelta(hours=1)
    )
    clock.advance("3m")
    assert (await later.tick()).schedules_materialized == 3


async def test_concurrent_ticks_create_one_run_per_slot(make_runtime: Factory) -> None:
    clock = ManualClock(datetime(2030, 1, 1, 12, 0, 30, tzinfo=UTC))
    _, minutely = _every_minute_task()
    runtimes = [await make_runtime([minutely], clock=clock) for _ in range(4)]
    await asyncio.gather(*(rl.tick() for rl in runtimes))  # first seen
    clock.advance("1m")
    for _ in range(5):
        reports = await asyncio.gather(*(rl.tick() for rl in runtimes))
        assert sum(r.schedules_materialized for r in reports) == 1
        clock.advance("1m")
    runs = await _all_runs(runtimes[0])
    assert len(runs) == 5
    assert len({r.source.occurs_at for r in runs}) == 5


async def test_after_downtime_only_the_latest_missed_slot_fires(make_runtime: Factory) -> None:
    clock = ManualClock(datetime(2030, 1, 1, 12, 0, 30, tzinfo=UTC))
    _, minutely = _every_minute_task()
    rl = await make_runtime([minutely], clock=clock)
    await rl.tick()
    clock.advance("10m")
    assert (await rl.tick()).schedules_materialized == 1
    newest = max(r.source.occurs_at for r in await _all_runs(rl) if r.source.occurs_at)
    assert newest == datetime(2030, 1, 1, 12, 10, tzinfo=UTC)


async def test_catch_up_fires_every_missed_slot(make_runtime: Factory) -> None:
    clock = ManualClock(datetime(2030, 1, 1, 12, 0, 30, tzinfo=UTC))
    _, minutely = _every_minute_task(catch_up=True)
    rl = await make_runtime([minutely], clock=clock)
    await rl.tick()
    clock.advance("10m")
    assert (await rl.tick()).schedules_materialized == 10
    assert len(await _all_runs(rl)) == 10


async def test_paused_schedules_stay_paused_across_restarts(make_runtime: Factory) -> None:
    clock = ManualClock(datetime(2030, 1, 1, 12, 0, 30, tzinfo=UTC))
    _, minutely = _every_minute_task()
    rl = await make_runtime([minutely], clock=clock)
    (info,) = await rl.schedules.list()
    assert info.id == "reports.every-minute" and info.task_id == "reports.minutely"
    assert info.next_fire_at == datetime(2030, 1, 1, 12, 1, tzinfo=UTC) and not info.paused
    paused = await rl.schedules.pause("reports.every-minute")
    assert paused.paused and paused.next_fire_at is None
    restarted = await make_runtime([minutely], clock=clock)
    assert (await restarted.tick()).schedules_materialized == 0
    assert (await restarted.schedules.list())[0].paused
    await restarted.schedules.resume("reports.every-minute")
    assert (await restarted.tick()).schedules_materialized == 0  # first seen now
    clock.advance("1m")
    assert (await restarted.tick()).schedules_materialized == 1
    with pytest.raises(RunlaneError) as caught:
        await rl.schedules.pause("no-such-schedule")
    assert caught.value.code is ErrorCode.SCHEDULE_NOT_FOUND


async def test_cron_schedules_fire_in_their_time_zone(make_runtime: Factory) -> None:
    clock = ManualClock(datetime(2030, 3, 1, 1, 30, tzinfo=UTC))

    @task(
        "invoices.nightly",
        schedules=[schedule("nightly", cron="0 3 * * *", timezone="Europe/Berlin")],
    )
    async def nightly(payload: Any, ctx: Context) -> None:
        return None

    rl = await make_runtime([nightly], clock=clock)
    (info,) = await rl.schedules.list()
    assert info.next_fire_at == datetime(2030, 3, 1, 2, 0, tzinfo=UTC)
    await rl.tick()
    clock.set(datetime(2030, 3, 1, 2, 0, 1, tzinfo=UTC))
    assert (await rl.tick()).schedules_materialized == 1
    latest = max(r.source.occurs_at for r in await _all_runs(rl) if r.source.occurs_at)
    assert latest == datetime(2030, 3, 1, 2, 0, tzinfo=UTC)


__all__ = [name for name in dir() if name.startswith("test_")]
pytestmark = pytest.mark.asyncio
