"""A task raising SystemExit or KeyboardInterrupt ends its worker process as it would
have, but only after its attempt is settled: the run is never left running."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from runlane import Runlane, RunStatus, postgres_lane, queue, sqlite_lane, task

ROOT = Path(__file__).resolve().parents[2]

APP = textwrap.dedent(
    """
    import asyncio, os, sys
    from runlane import Runlane, WorkerMode, postgres_lane, queue, sqlite_lane, task

    @task("exits")
    async def exits(payload, ctx):
        raise {exit_type}

    store = os.environ["STORE"]
    lane = postgres_lane(store) if store.startswith("postgres") else sqlite_lane(store)
    rl = Runlane(lane=lane, queues=[queue("main", default=True)], tasks=[exits],
                 environment=os.environ["ENVIRONMENT"])

    async def main():
        async with rl:
            await rl.worker(concurrency=1, handle_signals=False, mode=WorkerMode.DRAIN).run()

    asyncio.run(main())
    print("worker returned", flush=True)
    """
)


@task("exits")
async def _exits(payload: object, ctx: object) -> None:
    """The app's task as the test process registers it (it never runs here)."""


@pytest.mark.parametrize(
    ("exit_type", "returncode"), [("SystemExit(3)", 3), ("KeyboardInterrupt", None)]
)
async def test_a_worker_settles_the_attempt_before_a_task_exit_ends_it(
    driver: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    environment: str,
    exit_type: str,
    returncode: int | None,
) -> None:
    if driver == "sqlite":
        store = str(tmp_path / "exits.db")
        lane = sqlite_lane(store)
    else:
        store = request.getfixturevalue("postgres_dsn")
        lane = postgres_lane(store)
    rl = Runlane(
        lane=lane, queues=[queue("main", default=True)], tasks=[_exits], environment=environment
    )
    await rl.migrate()
    async with rl:
        run = await rl.trigger(_exits, None)
        proc = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-c", APP.format(exit_type=exit_type)],
            cwd=ROOT,
            env={**os.environ, "STORE": store, "ENVIRONMENT": environment},
            capture_output=True,
            text=True,
            timeout=60,
        )
        # The exit ended the process: the worker did not return normally.
        assert "worker returned" not in proc.stdout
        if returncode is not None:
            assert proc.returncode == returncode, proc.stderr
        else:
            assert proc.returncode != 0 and "KeyboardInterrupt" in proc.stderr
        stored = await rl.runs.get(run.id)
        assert stored.status is RunStatus.RETRYING and stored.lease is None
        assert stored.failure is not None and stored.failure.retryable
