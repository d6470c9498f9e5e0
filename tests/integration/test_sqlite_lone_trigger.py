"""A lone trigger on SQLite is one autocommitted INSERT: it waits for another
connection's write lock like any transaction, and fails typed when that lock
outlasts the busy timeout, writing nothing."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from runlane import Context, ErrorCode, Runlane, RunlaneError, RunStatus, queue, sqlite_lane, task

main = queue("main", default=True)


@task("lone.noop", queue=main)
async def noop(payload: Any, ctx: Context) -> None:
    return None


def _runtime(path: Path, busy_timeout_ms: int) -> Runlane:
    return Runlane(
        lane=sqlite_lane(str(path), busy_timeout_ms=busy_timeout_ms),
        queues=[main],
        tasks=[noop],
    )


async def test_a_lone_trigger_waits_for_another_connections_write_lock(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    async with _runtime(path, busy_timeout_ms=5_000) as rl:
        await rl.migrate()
        first = await rl.trigger(noop, {"first": True})
        holder = sqlite3.connect(path, isolation_level=None)
        try:
            holder.execute("BEGIN IMMEDIATE")
            waiting = asyncio.create_task(rl.trigger(noop, {"second": True}))
            await asyncio.sleep(0.3)
            assert not waiting.done()  # blocked on the lock, not failed
            holder.execute("COMMIT")
            second = await asyncio.wait_for(waiting, 5)
        finally:
            holder.close()
        assert second.status is RunStatus.QUEUED and second.payload == {"second": True}
        listed = await rl.runs.list(limit=10)
        assert {run.id for run in listed.data} == {first.id, second.id}
        assert [event.type.value for event in await rl.runs.events(second.id)] == ["run.created"]


async def test_a_lone_trigger_fails_typed_when_the_lock_outlasts_the_busy_timeout(
    tmp_path: Path,
) -> None:
    path = tmp_path / "app.db"
    async with _runtime(path, busy_timeout_ms=200) as rl:
        await rl.migrate()
        holder = sqlite3.connect(path, isolation_level=None)
        try:
            holder.execute("BEGIN IMMEDIATE")
            with pytest.raises(RunlaneError) as raised:
                await rl.trigger(noop, {"late": True})
            assert raised.value.code is ErrorCode.STORAGE_UNAVAILABLE
            holder.execute("ROLLBACK")
        finally:
            holder.close()
        assert (await rl.runs.list(limit=10)).data == []
