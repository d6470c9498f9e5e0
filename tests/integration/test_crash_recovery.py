"""A worker killed with SIGKILL loses nothing: maintenance recovers every run it held.

Each test writes a small app module into ``tmp_path``, runs a real worker from it in
a subprocess, kills that process with ``kill -9`` mid-attempt, and recovers from the
test process with ``tick`` and a fresh worker, on every storage driver.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType

import pytest

from runlane import Run, Runlane, RunStatus, WorkerMode
from runlane.types.runs import RunEventType

pytestmark = pytest.mark.slow

APP_SOURCE = textwrap.dedent(
    '''
    """A tiny Runlane app whose store is chosen by environment variables."""

    import asyncio
    import os
    from pathlib import Path

    from runlane import RetryPolicy, Runlane, postgres_lane, queue, sqlite_lane, task

    MAIN = queue("main", default=True)
    NO_BACKOFF = RetryPolicy(max_attempts=3, initial_delay="0s", max_delay="0s")


    @task("crash.hang_once", retry=NO_BACKOFF)
    async def hang_once(payload, ctx):
        if ctx.attempt == 1:
            Path(os.environ["CRASH_MARKER"]).write_text(ctx.run_id)
            await asyncio.sleep(60)
        return "recovered"


    @task("crash.record", retry=NO_BACKOFF)
    async def record(payload, ctx):
        # One short O_APPEND write per execution is atomic, even across processes.
        fd = os.open(os.environ["CRASH_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            os.write(fd, f"{ctx.run_id}\\n".encode())
        finally:
            os.close(fd)
        await asyncio.sleep(0.05)
        return payload["n"]


    def build():
        store = os.environ["CRASH_STORE"]
        if os.environ["CRASH_DRIVER"] == "sqlite":
            lane = sqlite_lane(store)
        else:
            lane = postgres_lane(store)
        return Runlane(
            lane=lane,
            queues=[MAIN],
            tasks=[hang_once, record],
            environment=os.environ["CRASH_ENVIRONMENT"],
        )
    '''
)

WORKER_LEASE = "1s"
WORKER_HEARTBEAT = "200ms"
#: How long to wait for the subprocess worker to reach a point before giving up.
STARTUP_TIMEOUT = 30.0
#: The mid-drain test kills its worker once this many of the bulk runs have started.
KILL_AFTER_EXECUTIONS = 40
BULK_RUNS = 200


class App:
    """The app module on disk, its paths, and the runtime the test process uses."""

    def __init__(self, directory: Path, module: ModuleType, rl: Runlane) -> None:
        self.directory = directory
        self.module = module
        self.rl = rl
        self.marker = Path(os.environ["CRASH_MARKER"])
        self.log = Path(os.environ["CRASH_LOG"])
        self.stderr = directory / "worker.stderr"

    def start_worker(self, *, concurrency: int = 10) -> subprocess.Popen[bytes]:
        """A polling worker in its own process, built from the app module."""
        code = (
            "import asyncio, crash_app\n"
            "rl = crash_app.build()\n"
            f"asyncio.run(rl.worker(concurrency={concurrency}, lease_duration={WORKER_LEASE!r}, "
            f"heartbeat_interval={WORKER_HEARTBEAT!r}).run())\n"
        )
        with self.stderr.open("ab") as stderr:
            return subprocess.Popen(
                [sys.executable, "-c", code],
                cwd=self.directory,
                env=os.environ.copy(),
                stdout=subprocess.DEVNULL,
                stderr=stderr,
            )

    async def wait_until(self, worker: subprocess.Popen[bytes], ready: Callable[[], bool]) -> None:
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while not ready():
            if worker.poll() is not None:
                pytest.fail(f"worker exited with {worker.returncode}:\n{self.stderr.read_text()}")
            if time.monotonic() > deadline:
                pytest.fail(f"worker never got there:\n{self.stderr.read_text()}")
            await asyncio.sleep(0.02)

    def executions(self) -> Counter[str]:
        """How often each run id's handler started, across every process."""
        if not self.log.exists():
            return Counter()
        return Counter(self.log.read_text().split())


def kill_hard(worker: subprocess.Popen[bytes]) -> None:
    """SIGKILL: no signal handler, no finally block, no graceful release."""
    os.kill(worker.pid, signal.SIGKILL)
    worker.wait(timeout=10)
    assert worker.returncode == -signal.SIGKILL


async def sleep_past(moment: datetime) -> None:
    """Sleep (real time) until ``moment`` has passed, plus a margin for clock reads."""
    remaining = (moment - datetime.now(UTC)).total_seconds()
    await asyncio.sleep(max(0.0, remaining) + 0.3)


async def event_types(rl: Runlane, run_id: str) -> list[RunEventType]:
    return [event.type for event in await rl.runs.events(run_id)]


async def all_runs(rl: Runlane, *statuses: RunStatus) -> list[Run]:
    runs: list[Run] = []
    cursor: str | None = None
    while True:
        page = await rl.runs.list(statuses=list(statuses) or None, limit=100, cursor=cursor)
        runs.extend(page.data)
        cursor = page.next_cursor
        if cursor is None:
            return runs


@pytest.fixture
def store(driver: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """Where the app keeps its truth: a SQLite file, or the session's PostgreSQL."""
    if driver == "sqlite":
        return str(tmp_path / "crash.db")
    return str(request.getfixturevalue("postgres_dsn"))


@pytest.fixture
def app_environment(
    driver: str, store: str, environment: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """The variables the app module reads, set here and inherited by worker processes."""
    monkeypatch.setenv("CRASH_DRIVER", driver)
    monkeypatch.setenv("CRASH_STORE", store)
    monkeypatch.setenv("CRASH_ENVIRONMENT", environment)
    monkeypatch.setenv("CRASH_MARKER", str(tmp_path / "attempt-1.started"))
    monkeypatch.setenv("CRASH_LOG", str(tmp_path / "executions.log"))
    (tmp_path / "crash_app.py").write_text(APP_SOURCE)
    return tmp_path


@pytest.fixture
async def app(app_environment: Path) -> AsyncIterator[App]:
    spec = importlib.util.spec_from_file_location(
        f"crash_app_{uuid.uuid4().hex}", app_environment / "crash_app.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    rl: Runlane = module.build()
    await rl.migrate()
    await rl.open()
    try:
        yield App(app_environment, module, rl)
    finally:
        await rl.close()


@pytest.fixture
def workers() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Worker processes started by a test; any still alive at the end are killed."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for worker in started:
        if worker.poll() is None:
            worker.kill()
            worker.wait(timeout=10)


async def test_a_run_whose_worker_was_killed_is_retried_after_its_lease_expires(
    app: App, workers: list[subprocess.Popen[bytes]]
) -> None:
    rl = app.rl
    worker = app.start_worker()
    workers.append(worker)
    run = await rl.trigger(app.module.hang_once, {})
    await app.wait_until(worker, app.marker.exists)
    assert app.marker.read_text() == run.id

    kill_hard(worker)

    orphaned = await rl.runs.get(run.id)
    assert orphaned.status is RunStatus.RUNNING
    assert orphaned.attempt == 1
    assert orphaned.lease is not None
    await sleep_past(orphaned.lease.expires_at)

    report = await rl.tick()
    assert report.leases_recovered == 1
    assert (await rl.runs.get(run.id)).status is RunStatus.RETRYING

    recovered = await rl.execute_next()
    assert recovered is not None and recovered.id == run.id
    assert recovered.status is RunStatus.SUCCEEDED
    assert recovered.result == "recovered"
    assert recovered.attempt == 2
    assert recovered.failure_count == 1
    events = await event_types(rl, run.id)
    assert events.count(RunEventType.LEASE_EXPIRED) == 1
    assert events.index(RunEventType.LEASE_EXPIRED) < events.index(RunEventType.SUCCEEDED)
    assert await rl.execute_next() is None


async def test_concurrent_ticks_recover_an_expired_lease_exactly_once(
    app: App, workers: list[subprocess.Popen[bytes]]
) -> None:
    rl = app.rl
    worker = app.start_worker()
    workers.append(worker)
    run = await rl.trigger(app.module.hang_once, {})
    await app.wait_until(worker, app.marker.exists)
    kill_hard(worker)
    orphaned = await rl.runs.get(run.id)
    assert orphaned.lease is not None
    await sleep_past(orphaned.lease.expires_at)

    other_process: Runlane = app.module.build()
    async with other_process:
        first, second = await asyncio.gather(rl.tick(), other_process.tick())

    assert first.leases_recovered + second.leases_recovered == 1
    assert (await rl.tick()).leases_recovered == 0
    assert (await event_types(rl, run.id)).count(RunEventType.LEASE_EXPIRED) == 1


async def test_killing_a_worker_mid_drain_loses_no_run_and_repeats_only_those_in_flight(
    app: App, workers: list[subprocess.Popen[bytes]]
) -> None:
    rl = app.rl
    triggered = await rl.trigger_many(app.module.record, [{"n": n} for n in range(BULK_RUNS)])
    worker = app.start_worker(concurrency=5)
    workers.append(worker)
    await app.wait_until(worker, lambda: sum(app.executions().values()) >= KILL_AFTER_EXECUTIONS)

    kill_hard(worker)

    in_flight = {run.id: run for run in await all_runs(rl, RunStatus.RUNNING)}
    finished_before_kill = await all_runs(rl, RunStatus.SUCCEEDED)
    assert in_flight, "the kill should have caught attempts in flight"
    assert len(finished_before_kill) < BULK_RUNS, "the kill should have come mid-drain"
    last_lease = max(run.lease.expires_at for run in in_flight.values() if run.lease)
    await sleep_past(last_lease)

    report = await rl.tick()
    assert report.leases_recovered == len(in_flight)
    fresh = rl.worker(mode=WorkerMode.DRAIN, concurrency=20, handle_signals=False)
    await asyncio.wait_for(fresh.run(), timeout=60)

    runs = {run.id: run for run in await all_runs(rl)}
    assert set(runs) == {run.id for run in triggered}
    assert {run.status for run in runs.values()} == {RunStatus.SUCCEEDED}
    executions = app.executions()
    assert set(executions) == set(runs), "every run executed at least once"
    repeated = {run_id for run_id, count in executions.items() if count > 1}
    assert repeated <= set(in_flight), "only runs in flight at the kill execute twice"
    assert max(executions.values()) <= 2
    for run_id, run in runs.items():
        expired = (await event_types(rl, run_id)).count(RunEventType.LEASE_EXPIRED)
        assert (run.attempt, expired) == ((2, 1) if run_id in in_flight else (1, 0)), run_id
        assert run.result == run.payload["n"]
