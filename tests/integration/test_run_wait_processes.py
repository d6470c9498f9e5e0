"""``rl.runs.wait`` across processes on both lanes: runs executed by real worker
processes reach waiters in the test process, and a waiter whose listening connection
is cut keeps waiting (it polls) and listens again."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

import psycopg
import pytest
from tests.support import worker_app

from runlane import Runlane, RunStatus

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(params=["postgres", "sqlite"])
def sqlite_path(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The lane under test: PostgreSQL (no path) or a SQLite file."""
    return str(tmp_path / "waits.db") if request.param == "sqlite" else ""


@pytest.fixture
async def app(postgres_dsn: str, environment: str, sqlite_path: str) -> AsyncIterator[Runlane]:
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(worker_app.LOG_TABLE)
    rl = worker_app.build_runtime(postgres_dsn, environment, sqlite_path)
    await rl.migrate()
    async with rl:
        yield rl


@contextmanager
def _workers(postgres_dsn: str, environment: str, sqlite_path: str) -> Iterator[None]:
    """Two worker processes of the app."""
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "RUNLANE_APP_DSN": postgres_dsn,
        "RUNLANE_APP_ENV": environment,
        "RUNLANE_APP_SQLITE": sqlite_path,
        "RUNLANE_APP_CONCURRENCY": "4",
    }
    procs = [
        subprocess.Popen([sys.executable, "-m", "tests.support.worker_app", "worker"], env=env)
        for _ in range(2)
    ]
    try:
        yield
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


async def test_waiters_get_the_runs_worker_processes_finish(
    app: Runlane, postgres_dsn: str, environment: str, sqlite_path: str
) -> None:
    runs = await app.trigger_many(worker_app.count, [None] * 100)
    waits = [app.runs.wait(run.id, timeout="60s") for run in runs]
    with _workers(postgres_dsn, environment, sqlite_path):
        finished = await asyncio.gather(*waits)
    assert [run.id for run in finished] == [run.id for run in runs]
    assert {run.status for run in finished} == {RunStatus.SUCCEEDED}


async def test_a_postgres_waiter_whose_listening_connection_is_cut_keeps_waiting_and_listens(
    postgres_dsn: str, environment: str
) -> None:
    app = worker_app.build_runtime(postgres_dsn, environment)
    await app.migrate()  # not left to an earlier test: this one may run first or alone
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(worker_app.LOG_TABLE)
    async with app, _with_workers(postgres_dsn, environment):
        await _cut_and_wait(app, postgres_dsn)


@asynccontextmanager
async def _with_workers(postgres_dsn: str, environment: str) -> AsyncIterator[None]:
    with _workers(postgres_dsn, environment, ""):
        yield


async def _cut_and_wait(app: Runlane, postgres_dsn: str) -> None:
    first = await app.trigger(worker_app.count, None, delay="3s")
    waiting = asyncio.ensure_future(app.runs.wait(first.id, timeout="30s"))
    channel_query = "LISTEN %runlane_finished_%"
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        for _ in range(100):
            cut = conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE query LIKE %s AND datname = current_database()",
                (channel_query,),
            ).fetchall()
            if cut:
                break
            await asyncio.sleep(0.05)
        assert cut, "the waiter never listened"
        assert (await asyncio.wait_for(waiting, 30)).status is RunStatus.SUCCEEDED
        second = await app.trigger(worker_app.count, None)
        assert (await app.runs.wait(second.id, timeout="30s")).status is RunStatus.SUCCEEDED
        listening = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE query LIKE %s AND pid <> pg_backend_pid()",
            (channel_query,),
        ).fetchone()
    assert listening is not None and listening[0] >= 1
