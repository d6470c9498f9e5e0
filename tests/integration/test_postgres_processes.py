"""Many processes on one PostgreSQL: exactly-once draining, restarts, capacity, schedules."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
from tests.support import worker_app
from tests.support.postgres_server import PostgresServer

from runlane import Runlane, RunStatus

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
async def app(postgres_dsn: str, environment: str) -> AsyncIterator[Runlane]:
    """The worker app's runtime, seen from the test process."""
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(worker_app.LOG_TABLE)
    rl = worker_app.build_runtime(postgres_dsn, environment)
    await rl.migrate()
    async with rl:
        yield rl


@contextmanager
def processes(
    role: str, count: int, dsn: str, environment: str, **extra: str
) -> Iterator[list[subprocess.Popen[bytes]]]:
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "RUNLANE_APP_DSN": dsn,
        "RUNLANE_APP_ENV": environment,
        **extra,
    }
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.support.worker_app", role], cwd=ROOT, env=env
        )
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


async def _wait_until_finished(rl: Runlane, total: int, within: float, tick: bool = False) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if tick:
            # The server may be restarting; the next pass tries again.
            with contextlib.suppress(Exception):
                await rl.tick()
        try:
            stats = await rl.queue_stats()
        except Exception:
            await asyncio.sleep(0.5)
            continue
        done = sum(s.counts.get(RunStatus.SUCCEEDED, 0) for s in stats)
        if done >= total:
            return
        await asyncio.sleep(0.5)
    raise AssertionError(f"runs did not finish within {within}s: {await rl.queue_stats()}")


def _log(dsn: str, environment: str, kind: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            "SELECT run_id, key, phase, at FROM app_log WHERE environment = %s AND kind = %s",
            (environment, kind),
        ).fetchall()


async def test_four_worker_processes_drain_20000_runs_each_exactly_once(
    app: Runlane, postgres_dsn: str, environment: str
) -> None:
    runs = await app.trigger_many(worker_app.count, [None] * 20_000)
    with processes("worker", 4, postgres_dsn, environment):
        await _wait_until_finished(app, 20_000, within=300)
    starts = [row[0] for row in _log(postgres_dsn, environment, "count")]
    assert len(starts) == 20_000
    assert set(starts) == {run.id for run in runs}


async def test_workers_reconnect_after_a_postgres_restart_and_lose_nothing(
    app: Runlane, postgres_dsn: str, environment: str, postgres_server: PostgresServer | None
) -> None:
    if postgres_server is None:
        pytest.skip(
            "RUNLANE_TEST_DATABASE_URL names an external server that this test cannot restart"
        )
    runs = await app.trigger_many(worker_app.count, [None] * 4_000)
    with processes("worker", 2, postgres_dsn, environment, RUNLANE_APP_CONCURRENCY="4"):
        while len(_log(postgres_dsn, environment, "count")) < 500:  # noqa: ASYNC110
            await asyncio.sleep(0.05)
        postgres_server.restart()
        await _wait_until_finished(app, 4_000, within=240, tick=True)
    executed = [row[0] for row in _log(postgres_dsn, environment, "count")]
    missing = {run.id for run in runs} - set(executed)
    assert not missing, await _histories(app, missing)
    # Only attempts in flight during the restart may have run twice (2 workers x 4 slots):
    # a settle that fails while the server is down is written again once it is back.
    twice = [run_id for run_id, n in collections.Counter(executed).items() if n > 1]
    assert len(executed) - len(set(executed)) <= 8, await _histories(app, twice)


async def _histories(rl: Runlane, run_ids: Iterable[str]) -> str:
    """What storage says happened to ``run_ids``, for a failure message."""
    lines = []
    for run_id in sorted(run_ids)[:10]:
        run = await rl.runs.get(run_id)
        events = ", ".join(
            f"{event.type.value}{event.data or ''}" for event in await rl.runs.events(run_id)
        )
        lines.append(f"{run_id} {run.status.value} attempt {run.attempt}: {events}")
    return "\n".join(lines)


async def test_a_bounded_queue_limit_holds_across_worker_processes(
    app: Runlane, postgres_dsn: str, environment: str
) -> None:
    keys = [f"tenant-{i}" for i in range(5)]
    for key in keys:
        await app.trigger_many(worker_app.interval, [{"key": key}] * 400, concurrency_key=key)
    with processes("worker", 4, postgres_dsn, environment, RUNLANE_APP_CONCURRENCY="8"):
        await _wait_until_finished(app, 2_000, within=300)
    rows = _log(postgres_dsn, environment, "interval")
    assert len(rows) == 4_000
    peak_per_key: dict[str, int] = {}
    events = sorted(
        ((at, 0 if phase == "end" else 1, key) for _, key, phase, at in rows),
        key=lambda item: (item[0], item[1]),
    )
    current: dict[str, int] = dict.fromkeys(keys, 0)
    peak_total = 0
    for _, starting, key in events:
        current[key] += 1 if starting else -1
        peak_per_key[key] = max(peak_per_key.get(key, 0), current[key])
        peak_total = max(peak_total, sum(current.values()))
    assert max(peak_per_key.values()) <= 3, peak_per_key
    assert max(peak_per_key.values()) == 3, "capacity was never fully used"
    assert peak_total > 3, "partitions were serialised instead of running side by side"


async def test_concurrent_ticking_processes_fire_each_slot_once(
    app: Runlane, postgres_dsn: str, environment: str
) -> None:
    with processes("ticker", 4, postgres_dsn, environment, RUNLANE_APP_SECONDS="5") as procs:
        for proc in procs:
            assert proc.wait(timeout=60) == 0
    runs = (await app.runs.list(tasks=[worker_app.every_second], limit=1000)).data
    slots: list[datetime] = [run.source.occurs_at for run in runs if run.source.occurs_at]
    assert len(runs) >= 4
    assert len(slots) == len(set(slots)) == len(runs)
    ordered = sorted(slots)
    assert all((b - a).total_seconds() == 1 for a, b in itertools.pairwise(ordered))
