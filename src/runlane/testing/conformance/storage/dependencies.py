"""Dependencies between runs (contract 8.1), through the runtime: every way a
dependency can end releases or cancels its dependents, in the write that ends it."""

from __future__ import annotations

import asyncio
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
    task,
)
from runlane.ports.storage import LeaseRequest, QueuePolicy
from runlane.testing.conformance.storage.support import (
    Factory,
    TransportFactory,
    _all_runs,
    _event_types,
)
from runlane.types.runs import Run

_ONCE = RetryPolicy(max_attempts=1)


def _tasks() -> tuple[list[str], Any, Any, Any]:
    """A task that succeeds, one that fails for good at once, and one that records
    what its dependencies were when it ran."""
    seen: list[str] = []

    @task("deps.ok")
    async def ok(payload: Any, ctx: Context) -> dict[str, Any]:
        seen.append(ctx.run_id)
        return {"ran": ctx.run_id}

    @task("deps.broken", retry=_ONCE)
    async def broken(payload: Any, ctx: Context) -> None:
        raise ValueError("broken on purpose")

    @task("deps.reader")
    async def reader(payload: Any, ctx: Context) -> list[list[Any]]:
        seen.append(ctx.run_id)
        return [[run.id, run.status.value, run.result] for run in await ctx.dependencies()]

    return seen, ok, broken, reader


async def _status(rl: Any, run: Run) -> RunStatus:
    found: Run = await rl.runs.get(run.id)
    return found.status


async def _drain(rl: Any) -> None:
    while await rl.execute_next() is not None:
        pass


async def test_a_dependent_waits_until_its_dependencies_succeed_then_becomes_due(
    make_runtime: Factory,
) -> None:
    seen, ok, _, _ = _tasks()
    rl = await make_runtime([ok])
    a = await rl.trigger(ok, None)
    b = await rl.trigger(ok, None)
    c = await rl.trigger(ok, None, after=[a, b.id])
    assert c.status is RunStatus.WAITING
    done = await rl.execute_next()
    assert done is not None and done.id == a.id
    assert await _status(rl, c) is RunStatus.WAITING
    assert await rl.execute_next() is not None  # b
    assert await _status(rl, c) is RunStatus.QUEUED
    await _drain(rl)
    assert seen == [a.id, b.id, c.id]
    created, *rest = await rl.runs.events(c.id)
    assert created.data["after"] == [a.id, b.id] and created.data["on_failure"] == "cancel"
    assert [event.type.value for event in rest] == [
        "run.dependencies_met",
        "run.started",
        "run.succeeded",
    ]


async def test_a_waiting_run_is_never_claimed_and_is_counted_per_queue(
    make_runtime: Factory,
) -> None:
    _, ok, _, _ = _tasks()
    rl = await make_runtime([ok])
    a = await rl.trigger(ok, None, delay="1h")
    await rl.trigger(ok, None, after=[a])
    assert await rl.execute_next() is None
    (main,) = [stats for stats in await rl.queue_stats() if stats.queue == "main"]
    assert main.counts.get(RunStatus.WAITING) == 1
    assert main.due == 0


async def test_a_dependency_that_already_succeeded_counts_at_once(make_runtime: Factory) -> None:
    _, ok, _, _ = _tasks()
    rl = await make_runtime([ok])
    a = await rl.trigger(ok, None)
    await _drain(rl)
    b = await rl.trigger(ok, None, after=[a])
    assert b.status is RunStatus.QUEUED
    assert await _event_types(rl, b.id) == ["run.created", "run.dependencies_met"]


async def test_a_dependency_that_already_failed_cancels_the_dependent_at_once(
    make_runtime: Factory,
) -> None:
    _, ok, broken, _ = _tasks()
    rl = await make_runtime([ok, broken])
    a = await rl.trigger(broken, None)
    await _drain(rl)
    b = await rl.trigger(ok, None, after=[a])
    assert b.status is RunStatus.CANCELLED and b.cancel_reason == "dependency_failed"
    events = await rl.runs.events(b.id)
    assert events[-1].data == {"reason": "dependency_failed", "dependency": a.id}


async def test_a_failure_after_its_retries_cancels_the_dependents_and_the_cascade_names_each_parent(
    make_runtime: Factory,
) -> None:
    seen, ok, broken, _ = _tasks()
    rl = await make_runtime([ok, broken])
    a = await rl.trigger(broken, None)
    b = await rl.trigger(ok, None, after=[a])
    c = await rl.trigger(ok, None, after=[b])
    d = await rl.trigger(ok, None, after=[c])
    await _drain(rl)
    assert seen == []
    for run, parent in ((b, a), (c, b), (d, c)):
        final = await rl.runs.get(run.id)
        assert final.status is RunStatus.CANCELLED and final.cancel_reason == "dependency_failed"
        assert (await rl.runs.events(run.id))[-1].data["dependency"] == parent.id


async def test_a_retried_failure_releases_dependents_only_when_retries_are_spent(
    make_runtime: Factory,
) -> None:
    clock = ManualClock()
    calls: list[int] = []

    @task("deps.flaky", retry=RetryPolicy(max_attempts=2, initial_delay="1s"))
    async def flaky(payload: Any, ctx: Context) -> None:
        calls.append(ctx.attempt)
        raise RuntimeError("still broken")

    _, ok, _, _ = _tasks()
    rl = await make_runtime([ok, flaky], clock=clock)
    a = await rl.trigger(flaky, None)
    b = await rl.trigger(ok, None, after=[a])
    await rl.execute_next()
    assert await _status(rl, a) is RunStatus.RETRYING
    assert await _status(rl, b) is RunStatus.WAITING
    clock.advance("1m")
    await rl.execute_next()
    assert calls == [1, 2]
    assert await _status(rl, b) is RunStatus.CANCELLED


async def test_on_failure_run_runs_the_dependent_whatever_its_dependencies_ended_as(
    make_runtime: Factory,
) -> None:
    _, ok, broken, reader = _tasks()
    rl = await make_runtime([ok, broken, reader])
    a = await rl.trigger(broken, None)
    b = await rl.trigger(ok, None)
    c = await rl.trigger(reader, None, after=[a, b], on_failure="run")
    await _drain(rl)
    final = await rl.runs.get(c.id)
    assert final.status is RunStatus.SUCCEEDED
    assert final.result == [
        [a.id, "failed", None],
        [b.id, "succeeded", {"ran": b.id}],
    ]
    met = [e for e in await rl.runs.events(c.id) if e.type.value == "run.dependencies_met"]
    assert met[0].data == {"failed_dependency": a.id}


async def test_an_operator_cancel_of_a_dependency_cancels_its_dependents_in_that_write(
    make_runtime: Factory,
) -> None:
    _, ok, _, _ = _tasks()
    rl = await make_runtime([ok])
    a = await rl.trigger(ok, None, delay="1h")
    b = await rl.trigger(ok, None, after=[a])
    c = await rl.trigger(ok, None, after=[a], on_failure="run")
    await rl.runs.cancel(a.id, reason="not today")
    assert await _status(rl, b) is RunStatus.CANCELLED
    assert await _status(rl, c) is RunStatus.QUEUED


async def test_cancelling_a_waiting_run_cancels_it_at_once_and_settles_its_own_dependents(
    make_runtime: Factory,
) -> None:
    _, ok, _, _ = _tasks()
    rl = await make_runtime([ok])
    a = await rl.trigger(ok, None, delay="1h")
    b = await rl.trigger(ok, None, after=[a])
    c = await rl.trigger(ok, None, after=[b])
    cancelled = await rl.runs.cancel(b.id)
    assert cancelled.status is RunStatus.CANCELLED
    assert await _status(rl, c) is RunStatus.CANCELLED
    # a finishing later changes nothing for the cancelled run
    await rl.runs.cancel(a.id)
    assert await _status(rl, b) is RunStatus.CANCELLED
    assert (await rl.tick()).waiting_runs_settled == 0


async def test_a_lease_expiry_past_the_last_attempt_settles_the_dependents_in_the_same_tick(
    make_runtime: Factory,
) -> None:
    clock = ManualClock()
    _, ok, broken, _ = _tasks()
    rl = await make_runtime([ok, broken], clock=clock)
    a = await rl.trigger(broken, None)
    b = await rl.trigger(ok, None, after=[a])
    lease = LeaseRequest("ghost-worker", clock.now() + timedelta(seconds=30))
    (claimed,) = await rl.storage.claim_due_runs(
        rl.environment, [QueuePolicy("main")], 1, lease, clock.now()
    )
    assert claimed.id == a.id
    clock.advance("31s")
    report = await rl.tick()
    assert report.leases_recovered == 1 and report.waiting_runs_settled == 0
    assert await _status(rl, a) is RunStatus.FAILED
    assert await _status(rl, b) is RunStatus.CANCELLED


async def test_a_dependent_with_a_later_run_at_becomes_scheduled_not_queued(
    make_runtime: Factory,
) -> None:
    clock = ManualClock()
    _, ok, _, _ = _tasks()
    rl = await make_runtime([ok], clock=clock)
    a = await rl.trigger(ok, None)
    b = await rl.trigger(ok, None, after=[a], delay="10m")
    await rl.execute_next()
    released = await rl.runs.get(b.id)
    assert released.status is RunStatus.SCHEDULED
    assert released.run_at == b.run_at
    assert await rl.execute_next() is None
    clock.advance("11m")
    done = await rl.execute_next()
    assert done is not None and done.id == b.id


async def test_trigger_many_after_waits_every_run(make_runtime: Factory) -> None:
    _, ok, _, _ = _tasks()
    rl = await make_runtime([ok])
    a = await rl.trigger(ok, None)
    runs = await rl.trigger_many(ok, [None, None, None], after=[a])
    assert {run.status for run in runs} == {RunStatus.WAITING}
    await rl.execute_next()
    assert {await _status(rl, run) for run in runs} == {RunStatus.QUEUED}


async def test_bad_dependencies_are_typed_errors_and_write_nothing(make_runtime: Factory) -> None:
    _, ok, _, _ = _tasks()
    rl = await make_runtime([ok])
    other = await make_runtime([ok], env=f"{rl.environment}-other")
    a = await rl.trigger(ok, None)
    foreign = await other.trigger(ok, None)
    cases: list[tuple[dict[str, Any], ErrorCode]] = [
        ({"after": ["no-such-run"]}, ErrorCode.RUN_NOT_FOUND),
        ({"after": [a, "no-such-run"]}, ErrorCode.RUN_NOT_FOUND),
        ({"after": [foreign]}, ErrorCode.RUN_NOT_FOUND),
        ({"after": [foreign.id]}, ErrorCode.RUN_NOT_FOUND),
        ({"after": [f"id-{i}" for i in range(1001)]}, ErrorCode.CONFIGURATION_INVALID),
        ({"after": [a], "on_failure": "ignore"}, ErrorCode.CONFIGURATION_INVALID),
        ({"after": a}, ErrorCode.CONFIGURATION_INVALID),
        ({"after": [3]}, ErrorCode.CONFIGURATION_INVALID),
    ]
    for options, code in cases:
        with pytest.raises(RunlaneError) as caught:
            await rl.trigger(ok, None, **options)
        assert caught.value.code is code, options
        with pytest.raises(RunlaneError):
            await rl.trigger_many(ok, [None, None], **options)
    assert [run.id for run in await _all_runs(rl)] == [a.id]
    assert await rl.runs.dependents(a.id) == []


async def test_concurrent_settles_of_a_fan_in_release_its_dependent_exactly_once(
    make_runtime: Factory,
) -> None:
    ran: list[str] = []

    @task("deps.slow")
    async def slow(payload: Any, ctx: Context) -> None:
        await asyncio.sleep(0.01)

    @task("deps.fan_in")
    async def fan_in(payload: Any, ctx: Context) -> None:
        ran.append(ctx.run_id)

    first = await make_runtime([slow, fan_in])
    second = await make_runtime([slow, fan_in])
    members = await first.trigger_many(slow, [None] * 40)
    join = await first.trigger(fan_in, None, after=members)
    await asyncio.gather(
        *(
            rl.worker(concurrency=8, mode="drain", handle_signals=False).run()
            for rl in (first, second)
        )
    )
    assert ran == [join.id]
    types = await _event_types(first, join.id)
    assert types.count("run.dependencies_met") == 1


async def test_pruning_keeps_a_finished_run_an_unfinished_run_depends_on(
    make_runtime: Factory,
) -> None:
    clock = ManualClock()
    _, ok, _, _ = _tasks()
    rl = await make_runtime([ok], clock=clock)
    a = await rl.trigger(ok, None)
    await rl.trigger(ok, None)
    late = await rl.trigger(ok, None, delay="1d")
    c = await rl.trigger(ok, None, after=[a, late])
    await rl.execute_next()
    await rl.execute_next()
    clock.advance("2h")
    assert await rl.runs.prune(older_than="1h") == 1  # the other one: c still waits for a
    assert {run.id for run in await _all_runs(rl)} == {a.id, late.id, c.id}
    await rl.runs.cancel(late.id)
    assert await _status(rl, c) is RunStatus.CANCELLED
    clock.advance("2h")
    assert await rl.runs.prune(older_than="1h") == 3
    assert await _all_runs(rl) == []


async def test_rerunning_a_cancelled_dependent_runs_it_without_dependencies(
    make_runtime: Factory,
) -> None:
    _, ok, broken, _ = _tasks()
    rl = await make_runtime([ok, broken])
    a = await rl.trigger(broken, None)
    b = await rl.trigger(ok, None, after=[a])
    await _drain(rl)
    assert await _status(rl, b) is RunStatus.CANCELLED
    again = await rl.runs.rerun(b.id)
    assert again.status is RunStatus.QUEUED
    assert await rl.runs.dependencies(again.id) == []
    done = await rl.execute_next()
    assert done is not None and done.id == again.id and done.status is RunStatus.SUCCEEDED


async def test_dependencies_and_dependents_are_read_back_in_order(make_runtime: Factory) -> None:
    _, ok, _, _ = _tasks()
    rl = await make_runtime([ok])
    a = await rl.trigger(ok, None)
    b = await rl.trigger(ok, None)
    c = await rl.trigger(ok, None, after=[b, a, b])
    assert [run.id for run in await rl.runs.dependencies(c.id)] == [b.id, a.id]
    assert [run.id for run in await rl.runs.dependents(a.id)] == [c.id]
    with pytest.raises(RunlaneError) as caught:
        await rl.runs.dependencies("no-such-run")
    assert caught.value.code is ErrorCode.RUN_NOT_FOUND


async def test_dependencies_sync_reads_them_from_a_sync_task(make_runtime: Factory) -> None:
    _, ok, _, _ = _tasks()

    @task("deps.sync_reader")
    def sync_reader(payload: Any, ctx: Context) -> list[str]:
        return [run.status.value for run in ctx.dependencies_sync()]

    rl = await make_runtime([ok, sync_reader])
    a = await rl.trigger(ok, None)
    b = await rl.trigger(sync_reader, None, after=[a])
    await _drain(rl)
    assert (await rl.runs.get(b.id)).result == ["succeeded"]


async def test_on_a_transport_lane_a_released_dependent_gets_its_wakeup(
    make_transport_runtime: TransportFactory,
) -> None:
    _, ok, _, _ = _tasks()
    rl, transport = await make_transport_runtime([ok])
    a = await rl.trigger(ok, None)
    b = await rl.trigger(ok, None, after=[a])
    later = await rl.trigger(ok, None, after=[a], delay="1h")
    assert [attempt.message.run_id for attempt in transport.published] == [a.id]
    result = await rl.execute_delivery(transport.published[0].message)
    assert result.run is not None and result.run.status is RunStatus.SUCCEEDED
    # The request was written by the settle of a, before any tick.
    assert await _event_types(rl, b.id) == [
        "run.created",
        "run.dependencies_met",
        "run.delivery_requested",
    ]
    assert await _event_types(rl, later.id) == ["run.created", "run.dependencies_met"]
    await rl.tick()
    woken = [attempt.message for attempt in transport.published[1:]]
    assert [message.run_id for message in woken] == [b.id]
    done = await rl.execute_delivery(woken[0])
    assert done.run is not None and done.run.status is RunStatus.SUCCEEDED


__all__ = [name for name in dir() if name.startswith("test_")]
pytestmark = pytest.mark.asyncio
