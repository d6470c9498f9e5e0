"""A worker runs each attempt in two steps, handler then settle, and frees its slot
between them; observers see one scope around both steps, even when a step fails."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from runlane import Context, Observer, Runlane, WorkerMode, queue, sqlite_lane, task
from runlane.core.lease_keeping import LeaseSettings
from runlane.core.observing import Attempt

MAIN = queue("main", default=True)


@task("steps.ok")
async def ok(payload: Any, ctx: Context) -> None:
    return None


#: Set by ``waits`` once its handler runs; each test that uses it puts a fresh one here.
handler_running: asyncio.Event | None = None


@task("steps.waits")
async def waits(payload: Any, ctx: Context) -> None:
    assert handler_running is not None
    handler_running.set()
    await asyncio.sleep(30)


class Sequence(Observer):
    """Records the order in which the hooks of one worker's attempts fire."""

    def __init__(self) -> None:
        self.events: list[str] = []

    def started(self, attempt: Attempt) -> None:
        self.events.append("started")

    @contextlib.asynccontextmanager
    async def attempt(self, attempt: Attempt) -> AsyncIterator[None]:
        self.events.append("enter")
        try:
            yield
        finally:
            self.events.append("exit")

    def slots(self, busy: int, total: int) -> None:
        self.events.append(f"slots {busy}")

    def settled(self, attempt: Attempt) -> None:
        self.events.append(f"settled {attempt.outcome.value if attempt.outcome else None}")


def _runtime(path: Path, observer: Observer) -> Runlane:
    return Runlane(
        lane=sqlite_lane(path),
        queues=[MAIN],
        tasks=[ok, waits],
        environment="steps",
        observers=[observer],
    )


async def test_the_slot_frees_after_the_handler_and_before_the_settle(tmp_path: Path) -> None:
    seen = Sequence()
    rl = _runtime(tmp_path / "steps.db", seen)
    await rl.migrate()
    async with rl:
        await rl.trigger(ok, {})
        await rl.worker(concurrency=1, mode=WorkerMode.DRAIN, handle_signals=False).run()
    # From the attempt's start (the worker reports its idle slots before it).
    attempt = seen.events[seen.events.index("started") :]
    assert [event for event in attempt if event != "slots 1"] == [
        "started",
        "enter",
        "slots 0",
        "settled succeeded",
        "exit",
    ]


async def test_a_step_that_raises_still_closes_the_observers_scope(tmp_path: Path) -> None:
    seen = Sequence()
    rl = _runtime(tmp_path / "raises.db", seen)
    await rl.migrate()
    async with rl:
        owner = "steps-test"
        runner = rl._attempts
        settings = LeaseSettings()
        await rl.trigger(waits, {})
        claimed = await rl.storage.claim_due_runs(
            "steps",
            rl.registry.queue_policies,
            1,
            runner.lease_request(owner, settings),
            rl.clock.now(),
        )
        (run,) = claimed

        # The handler step cancelled (a shutdown): the scope is left, nothing settled.
        cancelled = runner.begin(run, settings)
        global handler_running
        handler_running = running = asyncio.Event()
        call = asyncio.create_task(cancelled.call())
        await asyncio.wait_for(running.wait(), 10)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        assert seen.events == ["started", "enter", "exit"]

        # A run executed in full: one more scope, entered and left once.
        seen.events.clear()
        await rl.trigger(ok, {})
        settled = await rl.execute_next()
        assert settled is not None and settled.status.value == "succeeded"
        assert seen.events == ["started", "enter", "settled succeeded", "exit"]
