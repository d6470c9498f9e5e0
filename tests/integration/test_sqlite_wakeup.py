"""Cross-process wakeups on SQLite: an idle worker in another process starts new work at
once instead of at its next poll, whether it hears of commits by inotify or by
``PRAGMA data_version``."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from tests.support import sqlite_worker

from runlane import Runlane, RunStatus
from runlane.storage.sqlite import SqliteStorage
from runlane.storage.sqlite.listener import WorkListener
from runlane.testing import wait_for_status

ROOT = Path(__file__).resolve().parents[2]

#: The worker polls this rarely, so a run started well before it was woken, not polled.
POLL_INTERVAL = "60s"
#: How long a test waits for runs: a third of the poll interval.
WITHIN = 20.0


@pytest.fixture
async def producer(tmp_path: Path) -> AsyncIterator[Runlane]:
    rl = sqlite_worker.build_runtime(str(tmp_path / "runlane.db"))
    await rl.migrate()
    async with rl:
        yield rl


@contextmanager
def idle_worker(path: str, *, inotify: bool = True) -> Iterator[subprocess.Popen[str]]:
    """A worker process with a long poll interval, past its first (empty) claim."""
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "RUNLANE_APP_SQLITE": path,
        "RUNLANE_APP_POLL_INTERVAL": POLL_INTERVAL,
        "RUNLANE_APP_NO_INOTIFY": "" if inotify else "1",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.support.sqlite_worker"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        yield proc
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def _let_it_idle() -> None:
    # Past its first claim and first (immediate) wakeup: now it waits for commits.
    await asyncio.sleep(1.5)


@pytest.mark.parametrize("inotify", [True, False], ids=["inotify", "data_version"])
async def test_an_idle_worker_in_another_process_starts_a_run_long_before_its_poll(
    producer: Runlane, tmp_path: Path, inotify: bool
) -> None:
    with idle_worker(str(tmp_path / "runlane.db"), inotify=inotify):
        await _let_it_idle()
        run = await producer.trigger(sqlite_worker.ping, None)
        await wait_for_status(producer, run.id, RunStatus.SUCCEEDED, within=WITHIN)


async def test_a_burst_of_triggers_from_another_process_wakes_an_idle_worker_for_every_run(
    producer: Runlane, tmp_path: Path
) -> None:
    with idle_worker(str(tmp_path / "runlane.db")):
        await _let_it_idle()
        runs = [await producer.trigger(sqlite_worker.ping, None) for _ in range(40)]
        for run in runs:
            await wait_for_status(producer, run.id, RunStatus.SUCCEEDED, within=WITHIN)
        await _let_it_idle()
        # Idle again after the burst: a later trigger is heard as well.
        late = await producer.trigger(sqlite_worker.ping, None)
        await wait_for_status(producer, late.id, RunStatus.SUCCEEDED, within=WITHIN)


@pytest.mark.parametrize("inotify", [True, False], ids=["inotify", "data_version"])
async def test_a_listener_hears_a_commit_made_by_another_connection(
    producer: Runlane, tmp_path: Path, inotify: bool
) -> None:
    listener = WorkListener(str(tmp_path / "runlane.db"), inotify=inotify)
    try:
        # The first wait starts watching and says "look once more".
        assert await listener.wait("default", 0) is True
        if inotify and sys.platform.startswith("linux"):
            assert listener.method == "inotify"
        else:
            assert listener.method == "data_version"
        assert await listener.wait("default", 0.1) is False  # no commit since
        waiting = asyncio.ensure_future(listener.wait("default", WITHIN))
        await asyncio.sleep(0.05)
        await producer.trigger(sqlite_worker.ping, None)
        assert await waiting is True
    finally:
        await listener.close()


async def test_a_commit_made_while_nobody_waited_is_kept_once(
    producer: Runlane, tmp_path: Path
) -> None:
    storage = SqliteStorage(tmp_path / "runlane.db")
    await storage.open()
    try:
        assert await storage.wait_for_work("default", 0) is True  # watching starts
        await producer.trigger(sqlite_worker.ping, None)
        await asyncio.sleep(0.3)
        assert await storage.wait_for_work("default", WITHIN) is True
        assert await storage.wait_for_work("default", 0.1) is False
    finally:
        await storage.close()


async def test_an_in_memory_database_makes_waiting_a_plain_sleep() -> None:
    storage = SqliteStorage(":memory:")
    await storage.open()
    try:
        assert await storage.wait_for_work("default", 0.05) is False
    finally:
        await storage.close()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify is Linux only")
async def test_a_listener_goes_on_watching_after_the_log_file_is_removed(tmp_path: Path) -> None:
    """The last connection to close deletes the ``-wal`` file the watch was on."""
    path = str(tmp_path / "runlane.db")
    first = sqlite_worker.build_runtime(path)
    await first.migrate()
    listener = WorkListener(path)
    try:
        async with first:
            assert await listener.wait("default", 0) is True
            assert listener.method == "inotify"
        for _ in range(100):  # the removal is reported soon after the close
            if not listener.listening:
                break
            await asyncio.sleep(0.05)
        assert not listener.listening
        assert await listener.wait("default", 0) is True  # watching again: look once more
        second = sqlite_worker.build_runtime(path)
        async with second:
            waiting = asyncio.ensure_future(listener.wait("default", WITHIN))
            await asyncio.sleep(0.05)
            await second.trigger(sqlite_worker.ping, None)
            assert await waiting is True
    finally:
        await listener.close()


async def test_a_pause_and_a_resume_reach_an_idle_worker_of_another_process_at_once(
    producer: Runlane, tmp_path: Path
) -> None:
    with idle_worker(str(tmp_path / "runlane.db")):
        await _let_it_idle()
        await producer.queues.pause("main")
        # The trigger's commit wakes the worker, whose claim leaves the paused queue out.
        run = await producer.trigger(sqlite_worker.ping, None)
        await asyncio.sleep(2)
        assert (await producer.runs.get(run.id)).status is RunStatus.QUEUED
        # The resume's commit wakes it again, long before its poll.
        await producer.queues.resume("main")
        await wait_for_status(producer, run.id, RunStatus.SUCCEEDED, within=WITHIN)
