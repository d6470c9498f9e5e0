"""Worker processes alone (no tick process) run maintenance under one elected leader,
on both storage lanes: schedules fire each slot once, and when the leader is killed
another worker takes the lead and recovers the run the killed worker left behind."""

from __future__ import annotations

import asyncio
import inspect
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from tests.support import worker_app

from runlane import Runlane, RunStatus

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
#: Short intervals keep the test fast: SQLite's lead then lapses after 0.6s.
FAST = {"RUNLANE_APP_MAINTENANCE_INTERVAL": "200ms", "RUNLANE_APP_CONCURRENCY": "2"}


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, str]:
    """The worker app's store, as the environment variables its processes read."""
    if request.param == "sqlite":
        return {"RUNLANE_APP_SQLITE": str(tmp_path / "workers.db")}
    return {"RUNLANE_APP_DSN": str(request.getfixturevalue("postgres_dsn"))}


@pytest.fixture
async def app(store: dict[str, str], environment: str) -> AsyncIterator[Runlane]:
    """The worker app's runtime, seen from the test process."""
    rl = worker_app.build_runtime(
        store.get("RUNLANE_APP_DSN", ""), environment, store.get("RUNLANE_APP_SQLITE", "")
    )
    await rl.migrate()
    async with rl:
        yield rl


@contextmanager
def workers(count: int, store: dict[str, str], environment: str) -> Iterator[list[Any]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RUNLANE_APP_ENV": environment, **store, **FAST}
    procs = [
        subprocess.Popen([sys.executable, "-m", "tests.support.worker_app", "worker"], env=env)
        for _ in range(count)
    ]
    try:
        yield procs
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


async def _eventually(check: Callable[[], Any], within: float, what: str) -> Any:
    """Poll ``check`` (sync or async) until it returns something truthy."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        found = check()
        if inspect.isawaitable(found):
            found = await found
        if found:
            return found
        await asyncio.sleep(0.2)
    raise AssertionError(f"{what} did not happen within {within}s")


async def _slots(app: Runlane) -> list[datetime]:
    runs = (await app.runs.list(tasks=[worker_app.every_second], limit=1000)).data
    return [run.source.occurs_at for run in runs if run.source.occurs_at]


async def test_workers_alone_fire_each_slot_once_and_recover_a_killed_leaders_run(
    app: Runlane, store: dict[str, str], environment: str
) -> None:
    stalled = await app.trigger(worker_app.stall, None)

    async def held_by_first() -> bool:
        run = await app.runs.get(stalled.id)
        return run.status is RunStatus.RUNNING and run.lease is not None

    # The first worker runs alone: it leads maintenance and takes the stalling run.
    with workers(1, store, environment) as (first,):
        await _eventually(held_by_first, 30, "the first worker's claim")
        await _eventually(lambda: _slots(app), 30, "a slot fired by the first worker")
        owner = (await app.runs.get(stalled.id)).lease
        assert owner is not None and f"-{first.pid}-" in owner.owner
        with workers(2, store, environment):
            await asyncio.sleep(2.0)  # the others contend for the lead and lose
            first.kill()  # it dies holding the lead and the run's lease
            first.wait()
            killed_at = datetime.now(UTC)

            async def recovered() -> bool:
                return (await app.runs.get(stalled.id)).status is RunStatus.SUCCEEDED

            # No tick process: another worker takes the lead, recovers the run once
            # its 5s lease has expired, and its second attempt succeeds.
            await _eventually(recovered, 60, "recovery of the killed worker's run")
            await asyncio.sleep(2.5)

    run = await app.runs.get(stalled.id)
    assert run.status is RunStatus.SUCCEEDED and run.attempt == 2
    slots = await _slots(app)
    assert len(slots) == len(set(slots)), "a slot fired twice"
    assert sum(slot > killed_at for slot in slots) >= 2, "no new leader fired slots"
