"""Group commit of concurrent triggers, and bulk run ids."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import pytest

from runlane import Context, Runlane, queue, sqlite_lane, task
from runlane.core.producing import MAX_GROUP_SIZE, CreationBatcher
from runlane.ports.storage import CreateOutcome, CreatesRunBatches, NewRun
from runlane.types.clock import ManualClock
from runlane.types.ids import new_run_id
from runlane.types.runs import Run, RunSource, RunStatus

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _new(n: int) -> NewRun:
    return NewRun(
        id=f"run-{n}",
        task_id="t",
        queue="q",
        status=RunStatus.QUEUED,
        payload=n,
        payload_json=str(n),
        run_at=NOW,
        source=RunSource(),
    )


def _outcome(new: NewRun) -> CreateOutcome:
    run = Run(new.id, "env", "t", "q", RunStatus.QUEUED, new.payload, 0, 0, NOW, NOW, NOW, 1)
    return CreateOutcome(run, created=True)


class Storage:
    """Records each write; optionally fails the writes that include a given run."""

    def __init__(self, fail_on: str | None = None) -> None:
        self.writes: list[list[str]] = []
        self.fail_on = fail_on

    async def write(self, runs: Sequence[NewRun]) -> list[CreateOutcome]:
        self.writes.append([r.id for r in runs])
        await asyncio.sleep(0.01)  # a commit: callers arriving meanwhile wait for the next
        if self.fail_on in self.writes[-1]:
            raise RuntimeError("storage down")
        return [_outcome(r) for r in runs]


async def test_a_lone_trigger_is_written_at_once_and_alone() -> None:
    storage = Storage()
    batcher = CreationBatcher(storage.write)
    outcome = await batcher.create(_new(1))
    assert outcome.run.id == "run-1" and storage.writes == [["run-1"]]


async def test_concurrent_triggers_share_writes_and_each_gets_its_own_run() -> None:
    storage = Storage()
    batcher = CreationBatcher(storage.write)
    first = asyncio.ensure_future(batcher.create(_new(0)))
    await asyncio.sleep(0)  # its write is in flight now
    outcomes = await asyncio.gather(*(batcher.create(_new(n)) for n in range(1, 10)))
    assert (await first).run.id == "run-0"
    assert [o.run.id for o in outcomes] == [f"run-{n}" for n in range(1, 10)]
    # The first caller was written alone at once; the nine that came meanwhile share one write.
    assert storage.writes == [["run-0"], [f"run-{n}" for n in range(1, 10)]]


async def test_groups_are_bounded() -> None:
    storage = Storage()
    batcher = CreationBatcher(storage.write)
    await asyncio.gather(*(batcher.create(_new(n)) for n in range(MAX_GROUP_SIZE + 5)))
    # The first caller finds nothing in flight and writes alone; the rest wait in groups.
    assert [len(w) for w in storage.writes] == [1, MAX_GROUP_SIZE, 4]


async def test_a_failed_write_fails_its_group_only() -> None:
    storage = Storage(fail_on="run-3")
    batcher = CreationBatcher(storage.write)
    first = asyncio.ensure_future(batcher.create(_new(0)))
    await asyncio.sleep(0)
    group = [asyncio.ensure_future(batcher.create(_new(n))) for n in range(1, 5)]
    assert (await first).run.id == "run-0"
    for future in group:
        with pytest.raises(RuntimeError, match="storage down"):
            await future
    assert (await batcher.create(_new(9))).run.id == "run-9"


async def test_a_lone_trigger_writes_in_its_own_task() -> None:
    tasks: list[asyncio.Task[object] | None] = []

    async def write(runs: Sequence[NewRun]) -> list[CreateOutcome]:
        tasks.append(asyncio.current_task())
        return [_outcome(r) for r in runs]

    batcher = CreationBatcher(write)
    for n in range(3):
        await batcher.create(_new(n))
    # No task is started to hand a lone caller's run over: the caller writes it itself.
    assert tasks == [asyncio.current_task()] * 3


async def test_a_caller_cancelled_before_its_write_creates_nothing() -> None:
    storage = Storage()
    batcher = CreationBatcher(storage.write)
    first = asyncio.ensure_future(batcher.create(_new(0)))
    await asyncio.sleep(0)
    doomed = asyncio.ensure_future(batcher.create(_new(1)))
    kept = asyncio.ensure_future(batcher.create(_new(2)))
    await asyncio.sleep(0)
    doomed.cancel()
    await first
    assert (await kept).run.id == "run-2"
    assert storage.writes == [["run-0"], ["run-2"]]


def test_the_batcher_survives_a_new_event_loop() -> None:
    storage = Storage()
    batcher = CreationBatcher(storage.write)
    for n in range(2):
        assert asyncio.run(batcher.create(_new(n))).run.id == f"run-{n}"


def test_bulk_run_ids_are_uuid7_unique_and_in_creation_order() -> None:
    ids = new_run_id.many(5000) + [new_run_id() for _ in range(100)] + new_run_id.many(3)
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert all(uuid.UUID(i).version == 7 for i in ids[:50])
    assert new_run_id.many(0) == []


async def test_a_failed_bulk_batch_raises_its_own_error_and_stops_the_rest(
    tmp_path: pytest.TempPathFactory,
) -> None:
    from runlane import ErrorCode, Runlane, RunlaneError, queue, sqlite_lane, task

    @task("bulk.noop")
    async def noop(payload: int, ctx: Context) -> None:
        return None

    rl = Runlane(
        lane=sqlite_lane(f"{tmp_path}/bulk.db"), queues=[queue("main", default=True)], tasks=[noop]
    )
    async with rl:
        # Plain runs on SQLite go in as batch records (CreatesRunBatches).
        storage = cast(CreatesRunBatches, rl.storage)
        real = storage.create_run_batch
        calls = 0

        async def flaky(*args: object, **kwargs: object) -> list[Run]:
            nonlocal calls
            calls += 1
            if calls == 2:
                raise RunlaneError(ErrorCode.STORAGE_UNAVAILABLE, "down", retryable=True)
            return await real(*args, **kwargs)  # type: ignore[arg-type]

        storage.create_run_batch = flaky  # type: ignore[method-assign]
        with pytest.raises(RunlaneError) as caught:
            await rl.trigger_many(noop, list(range(5000)))
        assert caught.value.code is ErrorCode.STORAGE_UNAVAILABLE
        # Batches are atomic: whole ones written before the failure, none after it.
        written = len((await rl.runs.list(limit=1000)).data)
        assert written % 1000 == 0 and written < 5000


async def test_triggers_with_default_options_are_due_when_called_not_when_first_planned(
    tmp_path: Path,
) -> None:
    # A trigger with every option at its default reuses its task's plan from an earlier
    # call: its due time, and its idempotency key's expiry, still follow the clock.
    clock = ManualClock()
    main = queue("main", default=True)

    @task("keyed", idempotency_key=lambda payload: payload["k"], idempotency_key_ttl="1h")
    async def keyed(payload: Any, ctx: Context) -> None:
        """Does nothing."""

    rl = Runlane(lane=sqlite_lane(str(tmp_path / "q.db")), queues=[main], tasks=[keyed],
                 clock=clock)  # fmt: skip
    await rl.migrate()
    async with rl:
        first = await rl.trigger(keyed, {"k": "a"})
        clock.advance("59m")
        second = await rl.trigger(keyed, {"k": "b"})
        assert second.run_at == second.created_at == clock.now() > first.run_at
        assert second.status is RunStatus.QUEUED
        for run in (first, second):  # finished owners hold their keys until they expire
            await rl.runs.cancel(run.id)
        clock.advance("2m")  # a's key expired an hour after its trigger, b's holds
        assert (await rl.trigger(keyed, {"k": "a"})).id != first.id
        assert (await rl.trigger(keyed, {"k": "b"})).id == second.id


async def test_concurrent_default_triggers_on_a_runtime_share_writes_and_keep_errors_typed(
    tmp_path: Path,
) -> None:
    # rl.trigger with every option at its default writes a lone caller's run itself,
    # in fewer steps: callers arriving while it is in flight still share the next write.
    from runlane import ErrorCode, RunlaneError

    main = queue("main", default=True)

    @task("lone")
    async def lone(payload: int, ctx: Context) -> None:
        """Does nothing."""

    rl = Runlane(lane=sqlite_lane(str(tmp_path / "q.db")), queues=[main], tasks=[lone])
    await rl.migrate()
    async with rl:
        real = rl.storage.create_runs
        writes: list[int] = []

        async def recording(environment: str, runs: Sequence[NewRun], *args: Any,
                            **kwargs: Any) -> list[CreateOutcome]:  # fmt: skip
            writes.append(len(runs))
            await asyncio.sleep(0.01)  # a commit: callers arriving meanwhile wait for the next
            return await real(environment, runs, *args, **kwargs)

        rl.storage.create_runs = recording  # type: ignore[method-assign]
        runs = await asyncio.gather(*(rl.trigger(lone, n) for n in range(10)))
        assert [run.payload for run in runs] == list(range(10))
        assert writes == [1, 9]
        assert len((await rl.runs.list(limit=100)).data) == 10
        for bad, code in (("no-such-task", ErrorCode.TASK_NOT_FOUND), (lone, None)):
            with pytest.raises(RunlaneError) as caught:
                await rl.trigger(bad, object() if code is None else 1)
            assert code is None or caught.value.code is code
        assert writes == [1, 9]  # nothing written for them
