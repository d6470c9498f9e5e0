"""Groups and chains (contract 8.2), through the runtime."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from runlane import (
    Context,
    ErrorCode,
    RetryPolicy,
    RunlaneError,
    RunStatus,
    task,
)
from runlane.testing.conformance.storage.support import Factory, _all_runs


def _group_tasks() -> tuple[list[Any], Any, Any]:
    callbacks: list[Any] = []

    @task("groups.member", retry=RetryPolicy(max_attempts=1))
    async def member(payload: Any, ctx: Context) -> int:
        if payload.get("fail"):
            raise ValueError("member failed on purpose")
        return int(payload["n"])

    @task("groups.callback")
    async def callback(payload: Any, ctx: Context) -> None:
        members = await ctx.dependencies()
        callbacks.append((payload, [run.status.value for run in members]))

    return callbacks, member, callback


async def _drain(rl: Any) -> None:
    while await rl.execute_next() is not None:
        pass


async def test_a_group_runs_its_callback_once_after_every_member(make_runtime: Factory) -> None:
    callbacks, member, callback = _group_tasks()
    rl = await make_runtime([member, callback])
    group = await rl.trigger_group(
        member, [{"n": i} for i in range(5)], then=(callback, {"album": 7})
    )
    assert len(group.runs) == 5 and group.callback is not None
    assert group.callback.status is RunStatus.WAITING
    status = await rl.groups.get(group.id)
    assert (status.total, status.done, status.callback_id) == (5, 0, group.callback.id)
    assert status.counts == {RunStatus.QUEUED: 5}
    listed = await rl.runs.list(group=group.id)
    assert sorted(run.id for run in listed.data) == sorted(run.id for run in group.runs)
    created = (await rl.runs.events(group.callback.id))[0]
    assert sorted(created.data["after"]) == sorted(run.id for run in group.runs)
    await _drain(rl)
    assert callbacks == [({"album": 7}, ["succeeded"] * 5)]
    status = await rl.groups.get(group.id)
    assert (status.done, status.failed) == (5, 0)
    assert status.counts == {RunStatus.SUCCEEDED: 5}


async def test_a_failed_member_cancels_the_callback_unless_on_failure_run(
    make_runtime: Factory,
) -> None:
    callbacks, member, callback = _group_tasks()
    rl = await make_runtime([member, callback])
    payloads = [{"n": 1}, {"n": 2, "fail": True}]
    strict = await rl.trigger_group(member, payloads, then=(callback, "strict"))
    lenient = await rl.trigger_group(member, payloads, then=(callback, "lenient"), on_failure="run")
    await _drain(rl)
    assert strict.callback is not None and lenient.callback is not None
    cancelled = await rl.runs.get(strict.callback.id)
    assert cancelled.status is RunStatus.CANCELLED
    assert cancelled.cancel_reason == "dependency_failed"
    assert callbacks == [("lenient", ["succeeded", "failed"])]
    assert (await rl.groups.get(strict.id)).failed == 1


async def test_the_callback_of_a_group_finished_by_many_workers_runs_exactly_once(
    make_runtime: Factory,
) -> None:
    callbacks, member, callback = _group_tasks()
    runtimes = [await make_runtime([member, callback]) for _ in range(3)]
    group = await runtimes[0].trigger_group(
        member, [{"n": i} for i in range(200)], then=(callback, None)
    )
    await asyncio.gather(
        *(rl.worker(concurrency=10, mode="drain", handle_signals=False).run() for rl in runtimes)
    )
    assert len(callbacks) == 1
    assert (await runtimes[0].groups.get(group.id)).done == 200


async def test_bad_groups_are_typed_errors_and_write_nothing(make_runtime: Factory) -> None:
    _, member, callback = _group_tasks()
    rl = await make_runtime([member, callback])
    cases: list[tuple[Any, dict[str, Any], ErrorCode]] = [
        ([], {}, ErrorCode.CONFIGURATION_INVALID),
        ([{"n": 1}] * 10_001, {}, ErrorCode.CONFIGURATION_INVALID),
        ([{"n": 1}], {"on_failure": "maybe"}, ErrorCode.CONFIGURATION_INVALID),
        ([{"n": 1}], {"then": callback}, ErrorCode.CONFIGURATION_INVALID),
        ([{"n": 1}], {"then": ("no.such.task", None)}, ErrorCode.TASK_NOT_FOUND),
        ([{"n": 1}, {"n": object()}], {"then": (callback, None)}, ErrorCode.PAYLOAD_INVALID),
        ([{"n": 1}], {"then": (callback, {"x": object()})}, ErrorCode.PAYLOAD_INVALID),
    ]
    for payloads, options, code in cases:
        with pytest.raises(RunlaneError) as caught:
            await rl.trigger_group(member, payloads, **options)
        assert caught.value.code is code, (len(payloads), options)
    assert await _all_runs(rl) == []
    with pytest.raises(RunlaneError) as missing:
        await rl.groups.get("no-such-group")
    assert missing.value.code is ErrorCode.RUN_NOT_FOUND


async def test_a_chain_runs_its_steps_in_order_and_a_failed_step_cancels_the_rest(
    make_runtime: Factory,
) -> None:
    order: list[str] = []

    @task("chain.step", retry=RetryPolicy(max_attempts=1))
    async def step(payload: Any, ctx: Context) -> str:
        order.append(payload["name"])
        if payload.get("fail"):
            raise ValueError("step failed on purpose")
        previous = await ctx.dependencies()
        return str(payload["name"]) + "".join(str(run.result) for run in previous)

    rl = await make_runtime([step])
    fetched, parsed, stored = await rl.trigger_chain(
        [(step, {"name": "c"}), (step, {"name": "b"}), (step, {"name": "a"})]
    )
    assert [fetched.status, parsed.status, stored.status] == [
        RunStatus.QUEUED,
        RunStatus.WAITING,
        RunStatus.WAITING,
    ]
    await _drain(rl)
    assert order == ["c", "b", "a"]
    assert (await rl.runs.get(stored.id)).result == "abc"
    broken = await rl.trigger_chain(
        [(step, {"name": "x", "fail": True}), (step, {"name": "y"}), (step, {"name": "z"})]
    )
    await _drain(rl)
    assert [(await rl.runs.get(run.id)).status for run in broken] == [
        RunStatus.FAILED,
        RunStatus.CANCELLED,
        RunStatus.CANCELLED,
    ]
    bad_chains: list[tuple[Any, ErrorCode]] = [
        ([(step, {"name": "ok"}), (step, {"bad": object()})], ErrorCode.PAYLOAD_INVALID),
        ([(step, {"name": "ok"}), ("no.such.task", None)], ErrorCode.TASK_NOT_FOUND),
        ([(step, {"name": "ok"}), step], ErrorCode.CONFIGURATION_INVALID),
        ([], ErrorCode.CONFIGURATION_INVALID),
    ]
    for steps, code in bad_chains:
        with pytest.raises(RunlaneError) as caught:
            await rl.trigger_chain(steps)
        assert caught.value.code is code
    assert len(await _all_runs(rl)) == 6


__all__ = [name for name in dir() if name.startswith("test_")]
pytestmark = pytest.mark.asyncio
