"""Operating: listing, history, stats, reruns, pruning."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Any

import pytest

from runlane import (
    Context,
    ErrorCode,
    ManualClock,
    RetryPolicy,
    Runlane,
    RunlaneError,
    RunStatus,
    queue,
    task,
)
from runlane.testing import drain
from runlane.testing.conformance.storage.support import (
    MAIN,
    OTHER,
    Factory,
    _all_runs,
    _recorder,
)
from runlane.types.runs import Run, RunSourceType


async def test_environments_on_one_store_never_see_each_other(make_runtime: Factory) -> None:
    _, record = _recorder()
    blue = await make_runtime([record], env="blue-" + str(id(record)))
    green = await make_runtime([record], env="green-" + str(id(record)))
    run = await blue.trigger(record, {"order_id": 1})
    with pytest.raises(RunlaneError) as caught:
        await green.runs.get(run.id)
    assert caught.value.code is ErrorCode.RUN_NOT_FOUND
    assert await green.execute_next() is None
    assert (await green.runs.list()).data == []
    assert (await blue.execute_next()) is not None


async def test_runs_list_pages_newest_first_with_filters(make_runtime: Factory) -> None:
    _, record = _recorder()

    @task("other.task")
    async def other_task(payload: Any, ctx: Context) -> None:
        return None

    rl = await make_runtime([record, other_task])
    created = [await rl.trigger(record, {"order_id": i}) for i in range(5)]
    other = await rl.trigger(other_task, None, queue=OTHER)
    page = await rl.runs.list(limit=2)
    assert [r.id for r in page.data] == [other.id, created[4].id]
    assert page.next_cursor is not None
    rest = await rl.runs.list(limit=10, cursor=page.next_cursor)
    assert [r.id for r in rest.data] == [r.id for r in reversed(created[:4])]
    assert rest.next_cursor is None
    by_task = await rl.runs.list(tasks=[other_task])
    assert [r.id for r in by_task.data] == [other.id]
    by_queue = await rl.runs.list(queues=[MAIN])
    assert len(by_queue.data) == 5
    await rl.execute_next(queues=[OTHER])
    by_status = await rl.runs.list(statuses=[RunStatus.SUCCEEDED])
    assert [r.id for r in by_status.data] == [other.id]


async def test_retry_and_rerun_create_linked_child_runs(make_runtime: Factory) -> None:
    @task("flaky", retry=RetryPolicy(max_attempts=1))
    async def flaky(payload: Any, ctx: Context) -> str:
        if payload == "fail":
            raise RuntimeError("nope")
        return "ok"

    rl = await make_runtime([flaky])
    bad = await rl.trigger(flaky, "fail")
    good = await rl.trigger(flaky, "fine")
    await drain(rl)
    child = await rl.runs.retry(bad.id)
    assert child.source.type is RunSourceType.MANUAL_RETRY and child.source.run_id == bad.id
    assert child.status is RunStatus.QUEUED and child.payload == "fail"
    with pytest.raises(RunlaneError) as caught:
        await rl.runs.retry(good.id)
    assert caught.value.code is ErrorCode.INVALID_STATE
    rerun = await rl.runs.rerun(good.id)
    assert rerun.source.type is RunSourceType.RERUN and rerun.source.run_id == good.id
    with pytest.raises(RunlaneError) as active:
        await rl.runs.rerun(rerun.id)
    assert active.value.code is ErrorCode.INVALID_STATE


async def test_prune_deletes_old_finished_runs_with_their_history(make_runtime: Factory) -> None:
    clock = ManualClock()
    _, record = _recorder()
    rl = await make_runtime([record], clock=clock)
    old = await rl.trigger(record, {"order_id": 1})
    await drain(rl)
    clock.advance("2d")
    recent = await rl.trigger(record, {"order_id": 2})
    await drain(rl)
    waiting = await rl.trigger(record, {"order_id": 3})
    assert await rl.runs.prune(older_than="1d") == 1
    remaining = {r.id for r in await _all_runs(rl)}
    assert remaining == {recent.id, waiting.id}
    with pytest.raises(RunlaneError):
        await rl.runs.get(old.id)
    assert await rl.storage.list_run_events(rl.environment, old.id) == []


async def test_tick_prunes_past_the_retention_setting(make_runtime: Factory) -> None:
    clock = ManualClock()
    _, record = _recorder()
    rl = await make_runtime([record], clock=clock, retention="7d")
    await rl.trigger(record, {"order_id": 1})
    await drain(rl)
    assert (await rl.tick()).runs_pruned == 0
    clock.advance("8d")
    assert (await rl.tick()).runs_pruned == 1
    assert await _all_runs(rl) == []


async def test_queue_stats_count_runs_per_queue_and_status(make_runtime: Factory) -> None:
    _, record = _recorder()
    rl = await make_runtime([record])
    await rl.trigger_many(record, [{"order_id": i} for i in range(3)])
    await rl.trigger(record, {"order_id": 9}, queue=OTHER, delay="1h")
    await rl.execute_next()
    stats = {s.queue: s for s in await rl.queue_stats()}
    assert stats["main"].counts == {RunStatus.SUCCEEDED: 1, RunStatus.QUEUED: 2}
    assert stats["main"].waiting == 2 and stats["main"].running == 0
    assert stats["other"].counts == {RunStatus.SCHEDULED: 1}


async def test_queue_stats_count_due_runs_and_the_oldest_due_time(make_runtime: Factory) -> None:
    clock = ManualClock()
    _, record = _recorder()
    rl = await make_runtime([record], clock=clock)
    first = await rl.trigger(record, {"order_id": 1})
    clock.advance("10s")
    await rl.trigger(record, {"order_id": 2})
    await rl.trigger(record, {"order_id": 3}, delay="1h")
    await rl.trigger(record, {"order_id": 4}, queue=OTHER, delay="1m")
    stats = {s.queue: s for s in await rl.queue_stats()}
    assert (stats["main"].due, stats["main"].waiting) == (2, 3)
    assert stats["main"].oldest_due_at == first.run_at
    assert (stats["other"].due, stats["other"].oldest_due_at) == (0, None)
    clock.advance("2m")
    await rl.execute_next(queues=["main"])
    stats = {s.queue: s for s in await rl.queue_stats()}
    assert stats["main"].due == 1 and stats["main"].oldest_due_at != first.run_at
    assert stats["other"].due == 1 and stats["other"].oldest_due_at == clock.now() - timedelta(
        minutes=1
    )


async def test_queue_stats_count_due_runs_per_key_of_a_bounded_queue(
    make_runtime: Factory,
) -> None:
    serial = queue("serial", concurrency_limit=1)
    _, record = _recorder()
    rl = await make_runtime([record], queues=[serial])
    for key in ("a", "a", "b"):
        await rl.trigger(record, {"order_id": 1}, queue=serial, concurrency_key=key)
    stats = {s.concurrency_key: s for s in await rl.queue_stats()}
    assert (stats["a"].due, stats["b"].due) == (2, 1)


async def test_throughput_counts_runs_finished_inside_the_window_per_queue(
    make_runtime: Factory,
) -> None:
    clock = ManualClock()

    @task("outcomes.mixed", retry=RetryPolicy(max_attempts=1))
    async def mixed(payload: Any, ctx: Context) -> str:
        if payload == "fail":
            raise RuntimeError("no")
        return "ok"

    rl = await make_runtime([mixed], clock=clock)
    await rl.trigger(mixed, "ok")
    await drain(rl)
    clock.advance("2h")
    for payload in ("ok", "ok", "fail"):
        await rl.trigger(mixed, payload)
    await drain(rl)
    cancelled = await rl.trigger(mixed, "ok", queue=OTHER)
    await rl.runs.cancel(cancelled.id)
    await rl.trigger(mixed, "ok", queue=OTHER, delay="1h")

    recent = {t.queue: t for t in await rl.throughput("1h")}
    everything = {t.queue: t for t in await rl.throughput(clock.now() - timedelta(hours=3))}

    assert (recent["main"].succeeded, recent["main"].failed, recent["main"].cancelled) == (2, 1, 0)
    assert (recent["other"].succeeded, recent["other"].cancelled) == (0, 1)
    assert everything["main"].succeeded == 3
    with pytest.raises(RunlaneError) as raised:
        await rl.throughput(datetime(2026, 1, 1))
    assert raised.value.code is ErrorCode.CONFIGURATION_INVALID


async def test_outbox_backlog_is_zero_per_queue_without_a_transport(make_runtime: Factory) -> None:
    _, record = _recorder()
    rl = await make_runtime([record])
    await rl.trigger(record, {"order_id": 1})
    assert await rl.outbox_backlog() == {"main": 0, "other": 0}


async def test_the_sync_facade_blocks_for_results(
    make_runtime: Factory, lane_factory: Any, environment: str
) -> None:
    _, record = _recorder()
    rl = Runlane(lane=lane_factory(), queues=[MAIN, OTHER], tasks=[record], environment=environment)
    await asyncio.to_thread(rl.sync.migrate)

    def use() -> tuple[Run, Run]:
        run = rl.sync.trigger(record, {"order_id": 1})
        done = rl.sync.execute_next()
        assert done is not None
        return run, rl.sync.runs.get(run.id)

    try:
        run, stored = await asyncio.to_thread(use)
        assert stored.id == run.id and stored.status is RunStatus.SUCCEEDED
    finally:
        await asyncio.to_thread(rl.sync.close)


__all__ = [name for name in dir() if name.startswith("test_")]
pytestmark = pytest.mark.asyncio
