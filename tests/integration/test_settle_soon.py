"""A worker hands each attempt's outcome to its batch of settles and ends the attempt's
task there (``OpenAttempt.settle_soon``); the batch's flush does the rest. These check
what still has to hold: observers and ``on_progress`` hear every settled run, a settle
that loses its compare-and-set is decided again on the fresh run, and a batch that
cannot be written leaves the worker able to stop."""

from __future__ import annotations

import asyncio
import contextvars
import logging
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from runlane import Context, Observer, Runlane, RunStatus, WorkerMode, queue, sqlite_lane, task
from runlane.core.observing import Attempt
from runlane.types.runs import Run

MAIN = queue("main", default=True)
ENVIRONMENT = "soon"


@task("soon.ok")
async def ok(payload: Any, ctx: Context) -> int:
    return int(payload["n"])


#: The runtime ``cancels_itself`` asks through; each test that uses it sets it.
runtime: Runlane | None = None


@task("soon.cancels_itself")
async def cancels_itself(payload: Any, ctx: Context) -> None:
    """Asks for its own run's cancellation, then returns as if it had not noticed."""
    assert runtime is not None
    await runtime.runs.cancel(ctx.run_id, "changed its mind")


#: The database file ``breaks_settles`` breaks; each test that uses it sets it.
database: Path | None = None


@task("soon.breaks_settles")
async def breaks_settles(payload: Any, ctx: Context) -> None:
    """Renames the history table away, so the settle's batch cannot be written."""
    assert database is not None
    with sqlite3.connect(database) as conn:
        conn.execute("ALTER TABLE runlane_run_events RENAME TO moved_events")


class Hearing(Observer):
    """Records what observers hear, with no scope around attempts: the case where an
    attempt's outcome is handed to the batch."""

    def __init__(self) -> None:
        self.began: list[str] = []
        self.outcomes: dict[str, str | None] = {}
        self.settled_runs: dict[str, Run | None] = {}

    def started(self, attempt: Attempt) -> None:
        self.began.append(attempt.run.id)

    def settled(self, attempt: Attempt) -> None:
        self.outcomes[attempt.run.id] = attempt.outcome.value if attempt.outcome else None
        self.settled_runs[attempt.run.id] = attempt.settled


#: What an ``Ending`` observer's context makes current around the handler.
CURRENT: contextvars.ContextVar[str | None] = contextvars.ContextVar("current", default=None)


class _Ends:
    """A plain attempt context that also waits to hear the attempt end."""

    def __init__(self, seen: Ending, attempt: Attempt) -> None:
        self.seen, self.attempt = seen, attempt

    def __enter__(self) -> None:
        self.token = CURRENT.set(self.attempt.run.id)
        self.seen.events.append(("enter", self.attempt.run.id))
        self.seen.tasks[self.attempt.run.id] = asyncio.current_task()

    def __exit__(self, *exc: object) -> None:
        CURRENT.reset(self.token)
        self.seen.events.append(("exit", self.attempt.run.id))

    def attempt_ended(self) -> None:
        run_id, outcome = self.attempt.run.id, self.attempt.outcome
        self.seen.ended.append((run_id, outcome.value if outcome else None, CURRENT.get()))
        # Heard from the batch's flush, not from the attempt's own task.
        self.seen.same_task[run_id] = asyncio.current_task() is self.seen.tasks[run_id]
        self.seen.events.append(("ended", run_id))


class Ending(Observer):
    """An observer whose plain attempt context hears, through ``attempt_ended``, that
    the attempt is over (a tracer ends its span there)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []
        self.ended: list[tuple[str, str | None, str | None]] = []
        self.tasks: dict[str, asyncio.Task[Any] | None] = {}
        self.same_task: dict[str, bool] = {}

    def attempt(self, attempt: Attempt) -> _Ends:
        return _Ends(self, attempt)

    def settled(self, attempt: Attempt) -> None:
        self.events.append(("settled", attempt.run.id))


def _runtime(path: Path, *observers: Observer) -> Runlane:
    return Runlane(
        lane=sqlite_lane(path),
        queues=[MAIN],
        tasks=[ok, cancels_itself, breaks_settles],
        environment=ENVIRONMENT,
        observers=list(observers),
    )


async def test_observers_and_progress_hear_every_run_settled_from_the_batch(
    tmp_path: Path,
) -> None:
    heard, seen = Hearing(), Ending()
    rl = _runtime(tmp_path / "soon.db", heard, seen)
    await rl.migrate()
    progress: list[Run] = []
    async with rl:
        created = await rl.trigger_many(ok, [{"n": n} for n in range(40)])
        worker = rl.worker(
            concurrency=5, mode=WorkerMode.DRAIN, handle_signals=False, on_progress=progress.append
        )
        await asyncio.wait_for(worker.run(), 30)
        ids = {run.id for run in created}
        stored = {run.id: run for run in (await rl.runs.list(limit=100)).data}
    assert worker.executed == 40
    assert {run.id for run in stored.values() if run.status is RunStatus.SUCCEEDED} == ids
    # on_progress gets each run as settled: succeeded, with the handler's result.
    assert sorted(run.id for run in progress) == sorted(ids)
    assert all(run.status is RunStatus.SUCCEEDED for run in progress)
    assert {run.id: run.result for run in progress} == {i: stored[i].result for i in ids}
    # Observers hear each attempt start and settle, with the settled run.
    assert sorted(heard.began) == sorted(ids)
    assert heard.outcomes == dict.fromkeys(ids, "succeeded")
    for run_id, settled in heard.settled_runs.items():
        assert settled is not None and settled.status is RunStatus.SUCCEEDED
        assert settled.event_sequence == stored[run_id].event_sequence
    # A plain attempt context with attempt_ended is left when the handler returns (its
    # variable reset), the outcome still goes to the batch, and the context hears the
    # end once, after settled, from the flush that wrote it (not the attempt's task).
    assert sorted(seen.ended) == [(run_id, "succeeded", None) for run_id in sorted(ids)]
    assert seen.same_task == dict.fromkeys(ids, False)
    for run_id in ids:
        steps = [step for step, seen_id in seen.events if seen_id == run_id]
        assert steps == ["enter", "exit", "settled", "ended"]


async def test_a_settle_that_loses_its_compare_and_set_is_decided_on_the_fresh_run(
    tmp_path: Path,
) -> None:
    global runtime
    heard, seen = Hearing(), Ending()
    rl = runtime = _runtime(tmp_path / "race.db", heard, seen)
    await rl.migrate()
    async with rl:
        run = await rl.trigger(cancels_itself, {})
        worker = rl.worker(concurrency=1, mode=WorkerMode.DRAIN, handle_signals=False)
        await asyncio.wait_for(worker.run(), 30)
        stored = await rl.runs.get(run.id)
        events = [event.type.value for event in await rl.runs.events(run.id)]
    # The handler's success was written against the run as claimed; the cancellation
    # request had moved it on, so the settle read it again and ended it cancelled.
    assert stored.status is RunStatus.CANCELLED
    assert stored.cancel_reason == "changed its mind"
    assert events[-2:] == ["run.cancellation_requested", "run.cancelled"]
    assert "run.succeeded" not in events
    assert worker.executed == 1
    assert heard.outcomes == {run.id: "cancelled"}
    # A plain context waiting for the end hears it once, with the outcome decided then.
    assert seen.ended == [(run.id, "cancelled", None)]
    assert [step for step, _ in seen.events] == ["enter", "exit", "settled", "ended"]


async def test_a_batch_that_cannot_be_written_is_logged_and_the_worker_still_stops(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    global database
    database = tmp_path / "broken.db"
    heard, seen = Hearing(), Ending()
    rl = _runtime(database, heard, seen)
    await rl.migrate()
    async with rl:
        run = await rl.trigger(breaks_settles, {})
        worker = rl.worker(concurrency=1, mode=WorkerMode.DRAIN, handle_signals=False)
        with caplog.at_level(logging.ERROR, logger="runlane.worker"):
            # Nothing waits for the write but a future the failed flush resolves: the
            # draining worker sees its attempt end and stops.
            await asyncio.wait_for(worker.run(), 30)
        stored = await rl.runs.get(run.id)
    assert worker.executed == 0
    assert any(
        f"attempt of run {run.id} could not be settled" in record.getMessage()
        for record in caplog.records
    )
    # Nothing was written: the run keeps its lease until it expires (maintenance then
    # recovers it), and observers heard no settle.
    assert stored.status is RunStatus.RUNNING
    assert heard.outcomes == {}
    # A plain context waiting for the end still hears it, with no outcome.
    assert seen.ended == [(run.id, None, None)]
    assert [step for step, _ in seen.events] == ["enter", "exit", "ended"]


async def test_a_progress_callback_that_raises_keeps_the_rest_of_its_batch_hearing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    rl = _runtime(tmp_path / "progress.db")
    await rl.migrate()
    heard: list[str] = []

    def progress(run: Run) -> None:
        heard.append(run.id)
        if len(heard) == 1:
            raise RuntimeError("a progress bar that broke")

    async with rl:
        created = await rl.trigger_many(ok, [{"n": n} for n in range(5)])
        worker = rl.worker(
            concurrency=5, mode=WorkerMode.DRAIN, handle_signals=False, on_progress=progress
        )
        with caplog.at_level(logging.ERROR, logger="runlane.worker"):
            await asyncio.wait_for(worker.run(), 30)
        stored = (await rl.runs.list(limit=10)).data
    # Every run was written and heard of, the one whose callback raised included.
    assert sorted(heard) == sorted(run.id for run in created)
    assert all(run.status is RunStatus.SUCCEEDED for run in stored)
    assert worker.executed == 5
    assert [r.getMessage() for r in caplog.records].count("a settle's callback failed") == 1


async def test_an_outcome_that_cannot_be_handed_to_the_batch_still_ends_the_attempt(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fault while the outcome is being handed to the batch (here injected into the
    transition's computation) leaves nothing written: the worker logs the attempt as
    unsettled and stops, and a plain context waiting for the end still hears it, with
    no outcome, as after a batch that cannot be written."""
    import runlane.core.attempts as attempts

    def fails(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("transition fault")

    seen = Ending()
    rl = _runtime(tmp_path / "unhanded.db", seen)
    await rl.migrate()
    async with rl:
        run = await rl.trigger(ok, {"n": 1})
        monkeypatch.setattr(attempts, "settle_attempt", fails)
        worker = rl.worker(concurrency=1, mode=WorkerMode.DRAIN, handle_signals=False)
        with caplog.at_level(logging.ERROR, logger="runlane.worker"):
            await asyncio.wait_for(worker.run(), 30)
        monkeypatch.undo()
        stored = await rl.runs.get(run.id)
    assert worker.executed == 0
    assert any(
        f"attempt of run {run.id} could not be settled" in record.getMessage()
        for record in caplog.records
    )
    assert stored.status is RunStatus.RUNNING  # its lease expires; maintenance recovers it
    assert seen.ended == [(run.id, None, None)]
    assert [step for step, _ in seen.events] == ["enter", "exit", "ended"]
