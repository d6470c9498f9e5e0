"""An attempt's last progress rides on its settle (``AttemptProgress.end``): the settle
carries the latest report unless that report's own write already stored it, and a
write still in flight is waited for first, so it cannot land after the settle's value."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from runlane import Context, Runlane, RunStatus, queue, sqlite_lane, task
from runlane.core.progress import STORED, SWEEPS_PER_INTERVAL, AttemptProgress, ProgressWriter
from runlane.model.progress import check_progress
from runlane.model.transitions import Succeeded, settle_attempt
from runlane.ports.storage import LeaseRequest
from runlane.types.runs import Run

MAIN = queue("main", default=True)


@task("settles.noop")
async def noop(payload: Any, ctx: Context) -> None:
    return None


@pytest.fixture
async def rl(tmp_path: Path) -> AsyncIterator[Runlane]:
    runtime = Runlane(lane=sqlite_lane(tmp_path / "progress.db"), queues=[MAIN], tasks=[noop])
    await runtime.migrate()
    async with runtime:
        yield runtime


async def _leased(rl: Runlane) -> Run:
    run = await rl.trigger(noop, None)
    now = rl.clock.now()
    lease = LeaseRequest("worker-1", now + timedelta(minutes=1))
    leased = await rl.storage.claim_run(rl.environment, run.id, lease, now)
    assert leased is not None
    return leased


async def test_the_settle_carries_the_last_report_unless_its_own_write_stored_it(
    rl: Runlane,
) -> None:
    run = await _leased(rl)
    progress = AttemptProgress(ProgressWriter(rl.store), run)
    assert progress.latest is None and await progress.end() is None
    progress.offer(*check_progress(0.25, message="a quarter"))
    progress.write_latest()  # its interval is up: written while the attempt runs
    assert await progress.end() is None  # stored already: the settle carries nothing
    stored = await rl.storage.get_progress(rl.environment, [run.id])
    assert (stored[run.id].fraction, stored[run.id].message) == (0.25, "a quarter")
    progress.offer(*check_progress(0.5, message="half"))
    last = await progress.end()
    assert last is not None
    assert (last.run_id, last.attempt, last.fraction, last.message) == (run.id, 1, 0.5, "half")
    assert last.lease_token == run.lease.token  # type: ignore[union-attr]


async def test_a_write_in_flight_lands_before_the_settle_that_carries_the_newer_value(
    rl: Runlane,
) -> None:
    run = await _leased(rl)
    progress = AttemptProgress(ProgressWriter(rl.store), run)
    progress.offer(*check_progress(0.3))
    progress.write_latest()  # handed to the writer, not written yet
    progress.offer(*check_progress(0.6))
    last = await progress.end()
    assert last is not None and last.fraction == 0.6
    # The earlier write is stored by now, so nothing can replace the settle's value.
    assert (await rl.storage.get_progress(rl.environment, [run.id]))[run.id].fraction == 0.3
    now = rl.clock.now()
    done = settle_attempt(run, Succeeded(None), noop.retry, now, progress=last)
    assert await rl.storage.apply_transitions(rl.environment, [done], now) == [True]
    finished = await rl.runs.get(run.id)
    assert finished.status is RunStatus.SUCCEEDED
    assert finished.progress is not None and finished.progress.fraction == 0.6


async def test_an_attempt_that_handed_nothing_to_the_writer_settles_its_last_report(
    rl: Runlane,
) -> None:
    run = await _leased(rl)
    writer = ProgressWriter(rl.store)
    progress = AttemptProgress(writer, run)
    assert progress.last() is None
    progress.offer(*check_progress(0.2))
    progress.offer(*check_progress(0.4, message="most recent"))
    assert progress.handed is None
    last = progress.last()
    assert last is not None
    assert (last.run_id, last.attempt, last.fraction, last.message) == (
        run.id,
        1,
        0.4,
        "most recent",
    )
    # The writer holds the attempt no more: its interval passing writes nothing.
    assert progress.queued is None
    for _ in range(SWEEPS_PER_INTERVAL + 1):
        writer._sweep()
    assert await rl.storage.get_progress(rl.environment, [run.id]) == {}


async def test_what_a_report_returns_is_done_in_any_number_of_awaits(rl: Runlane) -> None:
    run = await _leased(rl)
    progress = AttemptProgress(ProgressWriter(rl.store), run)
    returned = progress.offer(*check_progress(0.1))
    assert returned is STORED and progress.queued is STORED
    assert await returned is None
    assert await returned is None
    assert await asyncio.gather(returned, returned) == [None, None]
    assert progress.last() is not None
