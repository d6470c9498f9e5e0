"""A small app run by multi-process tests: ``python -m tests.support.worker_app ROLE``.

The store comes from RUNLANE_APP_DSN (a PostgreSQL DSN) or RUNLANE_APP_SQLITE (a
file path); the environment from RUNLANE_APP_ENV. The ``count`` and ``interval``
tasks record what they did in the ``app_log`` table of the PostgreSQL database,
so the test process can check it afterwards.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from typing import Any

import psycopg

from runlane import (
    Context,
    RateLimit,
    RetryPolicy,
    Runlane,
    WorkerMode,
    postgres_lane,
    queue,
    schedule,
    sqlite_lane,
    task,
)

DSN = os.environ.get("RUNLANE_APP_DSN", "")
ENVIRONMENT = os.environ.get("RUNLANE_APP_ENV", "default")

main = queue("main", default=True)
limited = queue("limited", concurrency_limit=3)
#: Ten starts a second across every worker process, after a burst of three.
paced = queue("paced", rate_limit=RateLimit(10, per="1s", burst=3))
#: Five starts a second per tenant (the run's rate key), after a burst of two.
tenant_paced = queue(
    "tenant_paced", rate_limit=RateLimit(5, per="1s", burst=2), rate_limit_by="key"
)

_log: psycopg.AsyncConnection[Any] | None = None


async def _record(kind: str, run_id: str, key: str | None, started: bool) -> None:
    global _log
    if _log is None or _log.closed:
        _log = await psycopg.AsyncConnection.connect(DSN, autocommit=True)
        # The log is test bookkeeping: do not pay an fsync per row for it.
        await _log.execute("SET synchronous_commit = off")
    await _log.execute(
        "INSERT INTO app_log (environment, kind, run_id, key, phase, at, pid) "
        "VALUES (%s, %s, %s, %s, %s, clock_timestamp(), %s)",
        (ENVIRONMENT, kind, run_id, key, "start" if started else "end", os.getpid()),
    )


@task("count")
async def count(payload: Any, ctx: Context) -> None:
    """Records one execution."""
    await _record("count", ctx.run_id, None, True)


@task("interval", queue=limited)
async def interval(payload: Any, ctx: Context) -> None:
    """Records when it started and ended (its concurrency key is in the payload)."""
    await _record("interval", ctx.run_id, payload["key"], True)
    await asyncio.sleep(0.01)
    await _record("interval", ctx.run_id, payload["key"], False)


@task("paced", queue=paced, retry=RetryPolicy(max_attempts=5, initial_delay="100ms"))
async def paced_call(payload: Any, ctx: Context) -> None:
    """Records its start, as a partner's API would count the call; the first attempt of
    a run marked ``hang`` hangs (until its worker is killed)."""
    await _record("paced", ctx.run_id, str(ctx.attempt), True)
    if payload.get("hang") and ctx.attempt == 1:
        await asyncio.sleep(3600)


@task("tenant.paced", queue=tenant_paced, retry=RetryPolicy(max_attempts=5, initial_delay="100ms"))
async def tenant_paced_call(payload: Any, ctx: Context) -> None:
    """Records its start with its tenant and attempt (``tenant/attempt``); the first
    attempt of a run marked ``hang`` hangs (until its worker is killed)."""
    await _record("tenant_paced", ctx.run_id, f"{payload['tenant']}/{ctx.attempt}", True)
    if payload.get("hang") and ctx.attempt == 1:
        await asyncio.sleep(3600)


@task("every.second", schedules=[schedule("every-second", every="1s")])
async def every_second(payload: Any, ctx: Context) -> None:
    """A scheduled no-op."""


@task("stall", retry=RetryPolicy(max_attempts=3, initial_delay="100ms", jitter=False))
async def stall(payload: Any, ctx: Context) -> None:
    """Hangs in its first attempt (until its worker is killed); later attempts succeed."""
    if ctx.attempt == 1:
        await asyncio.sleep(3600)


@task("hold")
async def hold(payload: Any, ctx: Context) -> None:
    """Records its start, holds its lease for ``payload["seconds"]`` (longer than a
    lease, so only heartbeats keep it), then records its end."""
    await _record("hold", ctx.run_id, None, True)
    await asyncio.sleep(payload["seconds"])
    await _record("hold", ctx.run_id, None, False)


async def _record_host_clock() -> None:
    """Record this process's wall clock beside the server's (run id: its Unix time)."""
    async with await psycopg.AsyncConnection.connect(DSN, autocommit=True) as conn:
        await conn.execute(
            "INSERT INTO app_log (environment, kind, run_id, key, phase, at, pid) "
            "VALUES (%s, 'host_clock', %s, NULL, 'start', clock_timestamp(), %s)",
            (ENVIRONMENT, repr(time.time()), os.getpid()),
        )


def build_runtime(dsn: str, environment: str, sqlite_path: str = "") -> Runlane:
    """The app's runtime on ``dsn``, or on the SQLite file at ``sqlite_path`` when one is
    given (the test process builds the same one)."""
    return Runlane(
        lane=sqlite_lane(sqlite_path) if sqlite_path else postgres_lane(dsn),
        queues=[main, limited, paced, tenant_paced],
        tasks=[count, interval, every_second, stall, hold, paced_call, tenant_paced_call],
        environment=environment,
        lease_duration="5s",
    )


LOG_TABLE = """
CREATE TABLE IF NOT EXISTS app_log (
    environment TEXT NOT NULL, kind TEXT NOT NULL, run_id TEXT NOT NULL, key TEXT,
    phase TEXT NOT NULL, at TIMESTAMPTZ NOT NULL, pid INT NOT NULL
)
"""


async def _main(role: str) -> None:
    rl = build_runtime(DSN, ENVIRONMENT, os.environ.get("RUNLANE_APP_SQLITE", ""))
    if role == "worker":
        concurrency = int(os.environ.get("RUNLANE_APP_CONCURRENCY", "8"))
        if os.environ.get("RUNLANE_APP_RECORD_HOST_CLOCK"):
            await _record_host_clock()
        # Not opened first: the worker opens the lane, waiting if the server is down.
        try:
            # The rate-limited queue is served only by the tests that ask for it, so
            # the others' workers claim as they always did.
            names = os.environ.get("RUNLANE_APP_QUEUES", "main,limited").split(",")
            await rl.worker(
                queues=names,
                concurrency=concurrency,
                mode=WorkerMode.POLL,
                poll_interval=os.environ.get("RUNLANE_APP_POLL_INTERVAL", "50ms"),
                maintenance=os.environ.get("RUNLANE_APP_MAINTENANCE", "on") == "on",
                maintenance_interval=os.environ.get("RUNLANE_APP_MAINTENANCE_INTERVAL", "5s"),
            ).run()
        finally:
            await rl.close()
    elif role == "ticker":
        seconds = float(os.environ.get("RUNLANE_APP_SECONDS", "4"))
        async with rl:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + seconds
            while loop.time() < deadline:
                await rl.tick()
                await asyncio.sleep(0.01)
    else:
        raise SystemExit(f"unknown role {role!r}")


if __name__ == "__main__":
    asyncio.run(_main(sys.argv[1]))
