"""Priorities (SPEC-flow 7.2) through the runtime, timed by a ManualClock: one worker
starts the due runs of a queue highest priority first, equal priorities keep due-time
and id order, starvation is bounded by the queue's priority window, a run never
starts before it is due, retries and reruns keep the priority, and bad input writes
nothing."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from runlane import (
    Context,
    ErrorCode,
    ManualClock,
    RetryPolicy,
    RunlaneError,
    RunStatus,
    queue,
    schedule,
    task,
)
from runlane.testing.conformance.storage.support import MAIN, Factory, _recorder

#: A queue whose priority window is one minute: a priority-10 run goes ahead of
#: priority-0 runs due less than a minute before it.
MINUTE = queue("minute_window", priority_window="1m")
#: A bounded queue: its claim chooses within capacity, in the same order.
BOUNDED = queue("bounded", concurrency_limit=1)


async def _drain(rl: Any, queues: list[Any] | None = None) -> list[str]:
    """Start the due runs one by one (one worker slot); their ids in start order."""
    started = []
    while (run := await rl.execute_next(queues=queues)) is not None:
        started.append(run.id)
    return started


async def test_one_worker_starts_the_due_runs_highest_priority_first(
    make_runtime: Factory,
) -> None:
    _, record = _recorder()
    rl = await make_runtime([record], clock=ManualClock())
    low = await rl.trigger(record, {"order_id": 1}, priority=-3)
    normal = await rl.trigger(record, {"order_id": 2})
    urgent = await rl.trigger(record, {"order_id": 3}, priority=10)
    high = await rl.trigger(record, {"order_id": 4}, priority=5)
    assert [run.priority for run in (low, normal, urgent, high)] == [-3, 0, 10, 5]
    assert await _drain(rl) == [urgent.id, high.id, normal.id, low.id]


async def test_runs_of_equal_priority_keep_due_time_then_id_order(
    make_runtime: Factory,
) -> None:
    _, record = _recorder()
    clock = ManualClock()
    rl = await make_runtime([record], clock=clock)
    first = await rl.trigger(record, {"order_id": 1}, priority=4)
    clock.advance("1s")
    second = await rl.trigger(record, {"order_id": 2}, priority=4)
    batch = await rl.trigger_many(record, [{"order_id": 3}, {"order_id": 4}], priority=4)
    # Due earlier than all of them, though triggered last.
    earlier = await rl.trigger(
        record, {"order_id": 5}, priority=4, run_at=clock.now() - timedelta(seconds=5)
    )
    clock.advance("1s")
    # second and the batch are due at the same moment: by id.
    by_id = sorted(run.id for run in (second, *batch))
    assert await _drain(rl) == [earlier.id, first.id, *by_id]


async def test_a_priority_ten_run_goes_ahead_of_runs_due_less_than_one_window_before_it(
    make_runtime: Factory,
) -> None:
    _, record = _recorder()
    clock = ManualClock()
    rl = await make_runtime([record], queues=[MAIN, MINUTE], clock=clock)
    waiting = await rl.trigger(record, {"order_id": 1}, queue=MINUTE)
    clock.advance("59s")
    urgent = await rl.trigger(record, {"order_id": 2}, queue=MINUTE, priority=10)
    assert await _drain(rl, [MINUTE]) == [urgent.id, waiting.id]


async def test_a_run_due_longer_than_the_window_goes_before_a_newer_urgent_run(
    make_runtime: Factory,
) -> None:
    _, record = _recorder()
    clock = ManualClock()
    rl = await make_runtime([record], queues=[MAIN, MINUTE], clock=clock)
    old = await rl.trigger(record, {"order_id": 1}, queue=MINUTE)
    clock.advance("61s")
    urgent = await rl.trigger(record, {"order_id": 2}, queue=MINUTE, priority=10)
    assert await _drain(rl, [MINUTE]) == [old.id, urgent.id]


async def test_no_due_run_waits_behind_runs_due_more_than_two_windows_after_it(
    make_runtime: Factory,
) -> None:
    _, record = _recorder()
    clock = ManualClock()
    rl = await make_runtime([record], queues=[MAIN, MINUTE], clock=clock)
    lowest = await rl.trigger(record, {"order_id": 1}, queue=MINUTE, priority=-10)
    clock.advance("119s")
    within = await rl.trigger(record, {"order_id": 2}, queue=MINUTE, priority=10)
    clock.advance("2s")
    beyond = await rl.trigger(record, {"order_id": 3}, queue=MINUTE, priority=10)
    assert await _drain(rl, [MINUTE]) == [within.id, lowest.id, beyond.id]


async def test_priority_never_starts_a_run_before_it_is_due(make_runtime: Factory) -> None:
    _, record = _recorder()
    clock = ManualClock()
    rl = await make_runtime([record], clock=clock)
    later = await rl.trigger(record, {"order_id": 1}, priority=10, delay="10s")
    now = await rl.trigger(record, {"order_id": 2}, priority=-10)
    assert await _drain(rl) == [now.id]
    clock.advance("10s")
    assert await _drain(rl) == [later.id]


async def test_a_bounded_queue_starts_its_runs_in_priority_order_within_capacity(
    make_runtime: Factory,
) -> None:
    _, record = _recorder()
    rl = await make_runtime([record], queues=[MAIN, BOUNDED], clock=ManualClock())
    normal = await rl.trigger(record, {"order_id": 1}, queue=BOUNDED)
    urgent = await rl.trigger(record, {"order_id": 2}, queue=BOUNDED, priority=7)
    assert await _drain(rl, [BOUNDED]) == [urgent.id, normal.id]


async def test_a_retry_keeps_the_runs_priority_and_its_place(make_runtime: Factory) -> None:
    clock = ManualClock()
    attempts: list[tuple[int, int]] = []

    @task("flaky.once", retry=RetryPolicy(max_attempts=2, initial_delay="1s", max_delay="1s"))
    async def flaky(payload: Any, ctx: Context) -> None:
        attempts.append((payload["n"], ctx.attempt))
        if ctx.attempt == 1 and payload["n"] == 1:
            raise RuntimeError("first attempt fails")

    rl = await make_runtime([flaky], clock=clock)
    urgent = await rl.trigger(flaky, {"n": 1}, priority=9)
    failed = await rl.execute_next()
    assert failed is not None and failed.status is RunStatus.RETRYING
    assert failed.priority == 9
    normal = await rl.trigger(flaky, {"n": 2})
    clock.advance("1s")
    # The retry is due after the normal run was triggered, yet goes first.
    assert await _drain(rl) == [urgent.id, normal.id]
    assert (await rl.runs.get(urgent.id)).priority == 9
    assert attempts == [(1, 1), (1, 2), (2, 1)]


async def test_a_released_run_keeps_its_priority_and_goes_first_when_due_again(
    make_runtime: Factory,
) -> None:
    clock = ManualClock()
    started: list[int] = []

    @task("waits.once")
    async def waits_once(payload: Any, ctx: Context) -> Any:
        started.append(payload["n"])
        if ctx.attempt == 1 and payload["n"] == 1:
            return ctx.release("5s", reason="not ready")
        return None

    rl = await make_runtime([waits_once], clock=clock)
    urgent = await rl.trigger(waits_once, {"n": 1}, priority=8)
    released = await rl.execute_next()
    assert released is not None and released.status is RunStatus.RELEASED
    assert released.priority == 8
    clock.advance("3s")
    normal = await rl.trigger(waits_once, {"n": 2})
    clock.advance("2s")
    # Due again after the normal run was triggered, yet first: a release keeps the lead.
    assert await _drain(rl) == [urgent.id, normal.id]
    assert started == [1, 1, 2]


async def test_reruns_and_manual_retries_keep_the_priority(make_runtime: Factory) -> None:
    @task("fails.always", retry=RetryPolicy(max_attempts=1))
    async def fails(payload: Any, ctx: Context) -> None:
        raise RuntimeError("no")

    _, record = _recorder()
    rl = await make_runtime([record, fails], clock=ManualClock())
    done = await rl.trigger(record, {"order_id": 1}, priority=-4)
    failed = await rl.trigger(fails, None, priority=6)
    await _drain(rl)
    rerun = await rl.runs.rerun(done.id)
    retried = await rl.runs.retry(failed.id)
    assert (rerun.priority, retried.priority) == (-4, 6)
    assert (await rl.runs.get(rerun.id)).priority == -4
    assert (await rl.runs.get(retried.id)).priority == 6


async def test_a_schedules_runs_take_its_priority(make_runtime: Factory) -> None:
    @task("nightly.report", schedules=[schedule("report.every", every="1m", priority=8)])
    async def report(payload: Any, ctx: Context) -> None:
        return None

    clock = ManualClock()
    rl = await make_runtime([report], clock=clock)
    await rl.tick()
    clock.advance("1m")
    await rl.tick()
    runs = (await rl.runs.list(tasks=[report])).data
    assert runs and {run.priority for run in runs} == {8}


@pytest.mark.parametrize("bad", [11, -11, True, 1.5, "5", None])
async def test_a_bad_priority_is_configuration_invalid_and_writes_nothing(
    make_runtime: Factory, bad: Any
) -> None:
    _, record = _recorder()
    rl = await make_runtime([record], clock=ManualClock())
    with pytest.raises(RunlaneError) as lone:
        await rl.trigger(record, {"order_id": 1}, priority=bad)
    with pytest.raises(RunlaneError) as many:
        await rl.trigger_many(record, [{"order_id": 2}, {"order_id": 3}], priority=bad)
    assert lone.value.code is many.value.code is ErrorCode.CONFIGURATION_INVALID
    assert (await rl.runs.list()).data == []


async def test_two_definitions_of_a_queue_with_different_windows_drift(
    make_runtime: Factory,
) -> None:
    _, record = _recorder()
    rl = await make_runtime([record], queues=[MAIN, MINUTE], clock=ManualClock())
    other_window = queue(MINUTE.name, priority_window="2m")
    with pytest.raises(RunlaneError) as error:
        await rl.trigger(record, {"order_id": 1}, queue=other_window)
    assert error.value.code is ErrorCode.QUEUE_POLICY_DRIFT
    assert (await rl.runs.list()).data == []


__all__ = [name for name in dir() if name.startswith("test_")]
