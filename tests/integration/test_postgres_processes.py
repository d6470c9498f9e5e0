"""Many processes on one PostgreSQL: exactly-once draining, capacity, schedules (restarts:
``test_postgres_server_faults.py``)."""

from __future__ import annotations

import asyncio
import itertools
import signal
from collections.abc import AsyncIterator
from datetime import datetime, timedelta

import psycopg
import pytest
from tests.support import worker_app
from tests.support.app_processes import app_log, processes, wait_until_finished

from runlane import RunEventType, Runlane, RunStatus
from runlane.testing import wait_for_status

pytestmark = pytest.mark.slow


@pytest.fixture
async def app(postgres_dsn: str, environment: str) -> AsyncIterator[Runlane]:
    """The worker app's runtime, seen from the test process."""
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(worker_app.LOG_TABLE)
    rl = worker_app.build_runtime(postgres_dsn, environment)
    await rl.migrate()
    async with rl:
        yield rl


async def test_four_worker_processes_drain_20000_runs_each_exactly_once(
    app: Runlane, postgres_dsn: str, environment: str
) -> None:
    runs = await app.trigger_many(worker_app.count, [None] * 20_000)
    with processes("worker", 4, postgres_dsn, environment):
        await wait_until_finished(app, 20_000, within=300)
    starts = [row[0] for row in app_log(postgres_dsn, environment, "count")]
    assert len(starts) == 20_000
    assert set(starts) == {run.id for run in runs}


async def test_a_bounded_queue_limit_holds_across_worker_processes(
    app: Runlane, postgres_dsn: str, environment: str
) -> None:
    keys = [f"tenant-{i}" for i in range(5)]
    for key in keys:
        await app.trigger_many(worker_app.interval, [{"key": key}] * 400, concurrency_key=key)
    with processes("worker", 4, postgres_dsn, environment, RUNLANE_APP_CONCURRENCY="8"):
        await wait_until_finished(app, 2_000, within=300)
    rows = app_log(postgres_dsn, environment, "interval")
    assert len(rows) == 4_000
    peak_per_key: dict[str, int] = {}
    events = sorted(
        ((at, 0 if phase == "end" else 1, key) for _, key, phase, at, _ in rows),
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


async def test_a_rate_limit_holds_across_worker_processes_and_a_kill_9(
    app: Runlane, postgres_dsn: str, environment: str
) -> None:
    limit = worker_app.paced.rate_limit
    assert limit is not None
    runs = await app.trigger_many(worker_app.paced_call, [{"hang": False}] * 40)
    hung = await app.trigger(worker_app.paced_call, {"hang": True})
    with processes(
        "worker", 3, postgres_dsn, environment, RUNLANE_APP_QUEUES="main,paced"
    ) as procs:
        # Kill -9 whichever worker took the hanging run once it has started.
        deadline = asyncio.get_running_loop().time() + 60
        while not any(row[0] == hung.id for row in app_log(postgres_dsn, environment, "paced")):
            assert asyncio.get_running_loop().time() < deadline, "the hanging run never started"
            await asyncio.sleep(0.1)
        (pid,) = {
            row[4] for row in app_log(postgres_dsn, environment, "paced") if row[0] == hung.id
        }
        victim = next(proc for proc in procs if proc.pid == pid)
        victim.send_signal(signal.SIGKILL)
        victim.wait(timeout=10)
        # Not wait_until_finished: the app's every-second schedule adds runs of its own.
        deadline = asyncio.get_running_loop().time() + 120
        for run in [hung, *runs]:
            while (await app.runs.get(run.id)).status is not RunStatus.SUCCEEDED:
                assert asyncio.get_running_loop().time() < deadline, "the runs did not finish"
                await asyncio.sleep(0.2)
    # Every start as storage recorded it (the claim that took the token), the killed
    # attempt and its retry included.
    starts: list[datetime] = []
    for run in [*runs, hung]:
        events = await app.runs.events(run.id)
        starts += [e.occurred_at for e in events if e.type is RunEventType.STARTED]
    starts.sort()
    assert len(starts) == len(runs) + 2
    period = timedelta(seconds=limit.per)
    for index, start in enumerate(starts):
        in_window = sum(1 for later in starts[index:] if later - start < period)
        assert in_window <= limit.count + limit.burst - 1, (start, in_window)
    # The handlers saw the same starts: one per attempt, the killed one included.
    handled = app_log(postgres_dsn, environment, "paced")
    assert sorted((row[0], row[1]) for row in handled) == sorted(
        [(run.id, "1") for run in runs] + [(hung.id, "1"), (hung.id, "2")]
    )


async def test_a_rate_limit_per_key_holds_for_each_key_across_worker_processes_and_a_kill_9(
    app: Runlane, postgres_dsn: str, environment: str
) -> None:
    limit = worker_app.tenant_paced.rate_limit
    assert limit is not None
    tenants = [f"tenant-{i}" for i in range(4)]
    runs = await app.trigger_many(
        worker_app.tenant_paced_call,
        [{"tenant": t, "hang": False} for t in tenants for _ in range(12)],
        rate_key=lambda payload: payload["tenant"],
    )
    hung = await app.trigger(
        worker_app.tenant_paced_call, {"tenant": tenants[0], "hang": True}, rate_key=tenants[0]
    )
    with processes(
        "worker", 3, postgres_dsn, environment, RUNLANE_APP_QUEUES="main,tenant_paced"
    ) as procs:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60
        log = "tenant_paced"
        while not any(row[0] == hung.id for row in app_log(postgres_dsn, environment, log)):
            assert loop.time() < deadline, "the hanging run never started"
            await asyncio.sleep(0.1)
        (pid,) = {row[4] for row in app_log(postgres_dsn, environment, log) if row[0] == hung.id}
        victim = next(proc for proc in procs if proc.pid == pid)
        victim.send_signal(signal.SIGKILL)
        victim.wait(timeout=10)
        deadline = loop.time() + 120
        for run in [hung, *runs]:
            while (await app.runs.get(run.id)).status is not RunStatus.SUCCEEDED:
                assert loop.time() < deadline, "the runs did not finish"
                await asyncio.sleep(0.2)
    handled = app_log(postgres_dsn, environment, "tenant_paced")
    # One handler start per attempt, the killed one and its retry included.
    assert sorted((row[0], row[1].split("/")[1]) for row in handled) == sorted(
        [(run.id, "1") for run in runs] + [(hung.id, "1"), (hung.id, "2")]
    )
    period = timedelta(seconds=limit.per)
    most = limit.count + limit.burst - 1
    for tenant in tenants:
        ids = {run.id for run in [*runs, hung] if run.rate_key == tenant}
        # Storage's starts (the claims that took the tokens) fit the limit exactly.
        starts: list[datetime] = []
        for run_id in ids:
            events = await app.runs.events(run_id)
            starts += [e.occurred_at for e in events if e.type is RunEventType.STARTED]
        starts.sort()
        for index, start in enumerate(starts):
            in_window = sum(1 for later in starts[index:] if later - start < period)
            assert in_window <= most, (tenant, start, in_window)
        # So do the handlers' own start times, up to the moment between a claim and its
        # handler's first line (a window shorter by that much).
        seen = sorted(row[3] for row in handled if row[1].startswith(f"{tenant}/"))
        for index, start in enumerate(seen):
            in_window = sum(1 for later in seen[index:] if later - start < period * 0.75)
            assert in_window <= most, (tenant, start, in_window)


async def test_a_pause_and_a_resume_reach_idle_workers_of_other_processes_at_once(
    app: Runlane, postgres_dsn: str, environment: str
) -> None:
    # Workers that read the pauses only every 30 s: the announcement, not their poll,
    # must stop and restart them.
    with processes("worker", 2, postgres_dsn, environment, RUNLANE_APP_POLL_INTERVAL="30s"):
        first = await app.trigger(worker_app.count, None)
        await wait_for_status(app, first.id, RunStatus.SUCCEEDED, within=20)
        await app.queues.pause("main")
        waiting = await app.trigger_many(worker_app.count, [None] * 5)
        await asyncio.sleep(2)
        assert {(await app.runs.get(r.id)).status for r in waiting} == {RunStatus.QUEUED}
        await app.queues.resume("main")
        for run in waiting:
            await wait_for_status(app, run.id, RunStatus.SUCCEEDED, within=10)
