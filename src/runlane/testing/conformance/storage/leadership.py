"""Maintenance leadership: one leader per environment."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime
from typing import Any

import pytest

from runlane import (
    Context,
    ManualClock,
    Runlane,
    schedule,
    task,
)
from runlane.testing.conformance.storage.support import (
    Factory,
    _all_runs,
    _recorder,
)

LEAD_TTL = 15.0


async def _contend(rl: Runlane, holder: str, clock: ManualClock) -> bool:
    return await rl.storage.hold_maintenance_lead(rl.environment, holder, clock.now(), LEAD_TTL)


async def test_of_two_contenders_for_the_maintenance_lead_one_wins_and_keeps_it(
    make_runtime: Factory,
) -> None:
    clock = ManualClock(datetime(2030, 1, 1, tzinfo=UTC))
    _, record = _recorder()
    first, second = [await make_runtime([record], clock=clock) for _ in range(2)]
    won = await asyncio.gather(_contend(first, "a", clock), _contend(second, "b", clock))
    assert sorted(won) == [False, True]
    (leader, holder), (other, loser) = (
        ((first, "a"), (second, "b")) if won[0] else ((second, "b"), (first, "a"))
    )
    for _ in range(3):
        clock.advance(LEAD_TTL / 2)
        assert await _contend(leader, holder, clock)
        assert not await _contend(other, loser, clock)


async def test_one_store_session_gives_the_lead_to_one_holder_only(make_runtime: Factory) -> None:
    clock = ManualClock(datetime(2030, 1, 1, tzinfo=UTC))
    _, record = _recorder()
    rl = await make_runtime([record], clock=clock)
    assert await _contend(rl, "a", clock)
    assert not await _contend(rl, "b", clock)
    assert await _contend(rl, "a", clock)


async def test_releasing_the_maintenance_lead_hands_it_over_at_once(make_runtime: Factory) -> None:
    clock = ManualClock(datetime(2030, 1, 1, tzinfo=UTC))
    _, record = _recorder()
    first, second = [await make_runtime([record], clock=clock) for _ in range(2)]
    assert await _contend(first, "a", clock)
    await second.storage.release_maintenance_lead(second.environment, "b")  # not its lead
    assert not await _contend(second, "b", clock)
    await first.storage.release_maintenance_lead(first.environment, "a")
    assert await _contend(second, "b", clock)
    assert not await _contend(first, "a", clock)


async def test_a_leader_gone_without_releasing_is_replaced_once_its_lead_lapses(
    make_runtime: Factory,
) -> None:
    clock = ManualClock(datetime(2030, 1, 1, tzinfo=UTC))
    _, record = _recorder()
    first, second = [await make_runtime([record], clock=clock) for _ in range(2)]
    assert await _contend(first, "a", clock)
    await first.close()  # as a killed process: its session ends, its lease is not renewed
    clock.advance(LEAD_TTL + 1)
    # A server ends a closed session (and frees a lock held by it) a moment after the
    # client has gone, as it would for a killed one: contend until then, for a while.
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 10.0
    while not await _contend(second, "b", clock):
        assert loop.time() < deadline, "the lapsed lead was never taken over"
        await asyncio.sleep(0.02)


async def test_each_environment_has_its_own_maintenance_leader(make_runtime: Factory) -> None:
    clock = ManualClock(datetime(2030, 1, 1, tzinfo=UTC))
    _, record = _recorder()
    first = await make_runtime([record], clock=clock, env="lead-one")
    second = await make_runtime([record], clock=clock, env="lead-two")
    assert await _contend(first, "a", clock)
    assert await _contend(second, "b", clock)


async def test_polling_workers_elect_one_maintenance_leader_that_fires_each_slot_once(
    make_runtime: Factory, caplog: pytest.LogCaptureFixture
) -> None:
    @task("beats", schedules=[schedule("beats.every-200ms", every="200ms")])
    async def beats(payload: Any, ctx: Context) -> None:
        return None

    runtimes = [await make_runtime([beats]) for _ in range(3)]
    workers = [
        rl.worker(worker_id=f"w{i}", maintenance_interval="50ms", handle_signals=False)
        for i, rl in enumerate(runtimes)
    ]
    with caplog.at_level(logging.INFO, logger="runlane.maintenance"):
        running = [asyncio.create_task(worker.run()) for worker in workers]
        await asyncio.sleep(2.0)
        for worker in workers:
            await worker.stop()
        await asyncio.gather(*running)
    fired = [r.source.occurs_at for r in await _all_runs(runtimes[0])]
    assert len(fired) >= 3
    assert len(set(fired)) == len(fired)
    leaders = {r.getMessage().split(":")[0] for r in caplog.records if ": leads " in r.getMessage()}
    assert len(leaders) == 1, leaders


async def test_a_leading_worker_that_stops_hands_the_lead_over_at_once(
    make_runtime: Factory,
) -> None:
    _, record = _recorder()
    rl = await make_runtime([record])
    # Its lead would last 30s if it were not handed over.
    worker = rl.worker(worker_id="leader", maintenance_interval="10s", handle_signals=False)
    running = asyncio.create_task(worker.run())
    newcomer = await make_runtime([record])

    async def contend() -> bool:
        now = newcomer.clock.now()
        return await newcomer.storage.hold_maintenance_lead(rl.environment, "next", now, 30.0)

    await asyncio.sleep(0.5)
    assert not await contend()
    await worker.stop()
    await running
    assert await contend()


async def test_a_worker_without_maintenance_leaves_schedules_to_tick(
    make_runtime: Factory,
) -> None:
    @task("beats", schedules=[schedule("beats.every-200ms", every="200ms")])
    async def beats(payload: Any, ctx: Context) -> None:
        return None

    rl = await make_runtime([beats])
    worker = rl.worker(maintenance=False, handle_signals=False)
    assert worker.maintenance_interval is None
    running = asyncio.create_task(worker.run())
    await asyncio.sleep(1.0)
    await worker.stop()
    await running
    assert await rl.storage.get_schedule_states(rl.environment) == {}
    assert await _all_runs(rl) == []


__all__ = [name for name in dir() if name.startswith("test_")]
pytestmark = pytest.mark.asyncio
