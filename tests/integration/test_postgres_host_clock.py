"""A worker whose host clock is ten minutes off keeps to the database's clock
(SPEC-flow 10): real worker processes, one with its clock shifted by libfaketime,
beside one on the true time, on one PostgreSQL."""

from __future__ import annotations

import asyncio
import collections
import os
import shutil
from collections.abc import AsyncIterator
from datetime import datetime

import psycopg
import pytest
from tests.support import worker_app
from tests.support.app_processes import app_log, histories, processes, wait_until_finished

from runlane import Runlane, RunStatus
from runlane.types.runs import RunEventType

pytestmark = pytest.mark.slow

SHIFT_SECONDS = 600
HOLD_RUNS = 8
#: Longer than the app's lease (5 s): only heartbeats keep these runs' leases.
HOLD_SECONDS = 6


def faketime_prefix(shift: str) -> list[str]:
    """The command that runs a process with its clock shifted by ``shift``; skips loudly
    without libfaketime (fails under CI=true, where ``.ci/run`` installs it)."""
    binary = shutil.which("faketime")
    if binary is None:
        message = "the host-clock tests need libfaketime (Debian package `faketime`)"
        if os.environ.get("CI") == "true":
            pytest.fail(message + " (CI=true: a skip would hide the missing tool)")
        pytest.skip(message)
    # -f: the FAKETIME offset format; the clock keeps running from the shifted start.
    return [binary, "-f", shift]


@pytest.fixture
async def app(postgres_dsn: str, environment: str) -> AsyncIterator[Runlane]:
    """The worker app's runtime, seen from the test process."""
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(worker_app.LOG_TABLE)
    rl = worker_app.build_runtime(postgres_dsn, environment)
    await rl.migrate()
    async with rl:
        yield rl


def _server_now(dsn: str) -> datetime:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT clock_timestamp()").fetchone()
    assert row is not None
    return row[0]  # type: ignore[no-any-return]


@pytest.mark.parametrize("shift", ["+10m", "-10m"])
async def test_a_worker_whose_host_clock_is_ten_minutes_off_keeps_to_the_server_clock(
    app: Runlane, postgres_dsn: str, environment: str, shift: str
) -> None:
    prefix = faketime_prefix(shift)
    expected = SHIFT_SECONDS if shift.startswith("+") else -SHIFT_SECONDS
    holds = await app.trigger_many(worker_app.hold, [{"seconds": HOLD_SECONDS}] * HOLD_RUNS)
    # Due in five minutes: a worker ten minutes fast would think it due now.
    delayed = await app.trigger(worker_app.count, None, delay="5m")
    # The maintenance leader is the worker whose mistakes would show: a fast one would
    # recover healthy leases and fire schedule slots early; next to a slow one, a
    # correct leader would recover the slow worker's leases if their expiry followed
    # its clock.
    shifted_leads = shift.startswith("+")
    options = {"RUNLANE_APP_CONCURRENCY": "4", "RUNLANE_APP_MAINTENANCE_INTERVAL": "500ms"}
    with (
        processes(
            "worker",
            1,
            postgres_dsn,
            environment,
            prefix=prefix,
            RUNLANE_APP_RECORD_HOST_CLOCK="1",
            RUNLANE_APP_MAINTENANCE="on" if shifted_leads else "off",
            **options,
        ),
        processes(
            "worker",
            1,
            postgres_dsn,
            environment,
            RUNLANE_APP_MAINTENANCE="off" if shifted_leads else "on",
            **options,
        ),
    ):
        await wait_until_finished(app, HOLD_RUNS, within=120)
        # Let the leader run a few more passes over the schedule and the delayed run.
        await asyncio.sleep(2)
    server_now = _server_now(postgres_dsn)

    # The shift is real: the shifted process's wall clock against the server's.
    (clock_row,) = app_log(postgres_dsn, environment, "host_clock")
    host_time, server_time, shifted_pid = float(clock_row[0]), clock_row[3], clock_row[4]
    assert abs(host_time - server_time.timestamp() - expected) < 60, (host_time, server_time)

    # Every held run started once, on both workers, and no lease was judged expired.
    starts = [row for row in app_log(postgres_dsn, environment, "hold") if row[2] == "start"]
    counts = collections.Counter(row[0] for row in starts)
    ids = {run.id for run in holds}
    assert set(counts) == ids and set(counts.values()) == {1}, await histories(app, ids)
    assert shifted_pid in {row[4] for row in starts}, "the shifted worker held no lease"
    assert len({row[4] for row in starts}) == 2, "one worker held every lease"
    for run_id in ids:
        events = await app.runs.events(run_id)
        assert RunEventType.LEASE_EXPIRED not in {e.type for e in events}, await histories(
            app, [run_id]
        )

    # The delayed run did not start before it was due.
    assert (await app.runs.get(delayed.id)).status is RunStatus.SCHEDULED
    assert delayed.id not in {row[0] for row in app_log(postgres_dsn, environment, "count")}

    # Schedule slots fired on the server's time, each once.
    scheduled = (await app.runs.list(tasks=[worker_app.every_second], limit=1000)).data
    slots = [run.source.occurs_at for run in scheduled if run.source.occurs_at is not None]
    assert slots, "the maintenance leader fired no schedule slot"
    assert max(slots) <= server_now
    assert len(slots) == len(set(slots))
