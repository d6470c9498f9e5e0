"""Worker app processes for multi-process tests (``tests.support.worker_app``), and
what the test process reads back: the app's log and the runs' histories."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg

from runlane import Runlane, RunStatus

ROOT = Path(__file__).resolve().parents[2]


@contextmanager
def processes(
    role: str,
    count: int,
    dsn: str,
    environment: str,
    *,
    prefix: Sequence[str] = (),
    **extra: str,
) -> Iterator[list[subprocess.Popen[bytes]]]:
    """``count`` processes of the worker app in ``role``, stopped (SIGTERM) at the end;
    ``prefix`` goes before the command (e.g. ``faketime -f +10m``)."""
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "RUNLANE_APP_DSN": dsn,
        "RUNLANE_APP_ENV": environment,
        **extra,
    }
    command = [*prefix, sys.executable, "-m", "tests.support.worker_app", role]
    # Each in a process group of its own, signalled as a group: with a ``prefix`` the
    # Popen child is the wrapper (faketime forks the worker and waits), and a signal to
    # the wrapper alone would leave the worker running, orphaned, after the test.
    procs = [
        subprocess.Popen(command, cwd=ROOT, env=env, start_new_session=True) for _ in range(count)
    ]
    try:
        yield procs
    finally:
        for proc in procs:
            _signal_group(proc, signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                _signal_group(proc, signal.SIGKILL)
                proc.wait()
            # The wrapper may have ended before the worker it started: end the rest.
            _signal_group(proc, signal.SIGKILL)


def _signal_group(proc: subprocess.Popen[bytes], signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signum)


async def wait_until_finished(rl: Runlane, total: int, within: float, tick: bool = False) -> None:
    """Wait until ``total`` runs succeeded (ticking too when ``tick``), or fail."""
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


def app_log(dsn: str, environment: str, kind: str) -> list[tuple[Any, ...]]:
    """The app's log rows of ``kind``: (run id, key, phase, at, pid)."""
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            "SELECT run_id, key, phase, at, pid FROM app_log WHERE environment = %s AND kind = %s",
            (environment, kind),
        ).fetchall()


async def histories(rl: Runlane, run_ids: Iterable[str]) -> str:
    """What storage says happened to ``run_ids``, for a failure message."""
    lines = []
    for run_id in sorted(run_ids)[:10]:
        run = await rl.runs.get(run_id)
        events = ", ".join(
            f"{event.type.value}{event.data or ''}" for event in await rl.runs.events(run_id)
        )
        lines.append(f"{run_id} {run.status.value} attempt {run.attempt}: {events}")
    return "\n".join(lines)
