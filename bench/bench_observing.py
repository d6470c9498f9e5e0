"""Observing runs: how soon ``rl.runs.wait`` in another process hears an outcome, and
what ``ctx.progress`` costs a drain.

::

    .venv/bin/python bench/bench_observing.py wait --lane sqlite --samples 200
    .venv/bin/python bench/bench_observing.py wait --lane postgres --samples 200
    .venv/bin/python bench/bench_observing.py progress --lane sqlite --runs 5000 --rounds 5
    .venv/bin/python bench/bench_observing.py progress --lane postgres --runs 5000 --rounds 5
    .venv/bin/python bench/bench_observing.py waiters --lane postgres --waiters 1000

PostgreSQL: a throwaway server, or ``RUNLANE_BENCH_DATABASE_URL``.

``wait``: a waiter process keeps one runtime open (as a web app does) and waits for
one run at a time; this process triggers the run, lets the waiter start waiting,
then executes the run (``execute_next``). The latency is from the moment
``execute_next`` returned, just after the outcome's commit, to the moment ``wait``
returned in the waiter (both read ``time.time()`` on this machine), so it slightly
under-counts by the few microseconds between the commit and that return. Printed:
p50, p90, p99, max.

``progress``: a ``WorkerMode.DRAIN`` worker (concurrency 32) drains ``--runs`` queued
runs whose task takes ten steps and calls ``ctx.progress`` after each, and the same
without reports, taking turns on fresh stores; printed: the median rate of each and
the overhead. By default a step is nothing at all, the worst case (each report's
check and hand-over is then set against an attempt that does nothing);
``--step-ms 1`` makes each step an ``await asyncio.sleep(0.001)``, a task of about
10 ms such as one that reports progress is.

``waiters``: ``--waiters`` concurrent waits in one process on runs another process
finishes; printed: how many listening connections the waiting process held on the
server (PostgreSQL) and the waiting process's CPU time per finished run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for tests.support

from tests.support.postgres_server import bench_database

from runlane import Context, Lane, Runlane, WorkerMode, postgres_lane, queue, sqlite_lane, task

main = queue("main", default=True)


@task("bench.noop")
async def noop(payload: Any, ctx: Context) -> None:
    """Ten steps of ``payload`` seconds each (none: a no-op)."""
    for _ in range(10):
        if payload:
            await asyncio.sleep(payload)


@task("bench.reporting")
async def reporting(payload: Any, ctx: Context) -> None:
    """:func:`noop`, reporting progress after each step."""
    for step in range(1, 11):
        if payload:
            await asyncio.sleep(payload)
        await ctx.progress(step / 10, message=f"step {step} of 10")


def _lane(kind: str, target: str, schema: str) -> Lane:
    return sqlite_lane(target) if kind == "sqlite" else postgres_lane(target, schema=schema)


def _runtime(kind: str, target: str, schema: str, environment: str = "bench") -> Runlane:
    return Runlane(
        lane=_lane(kind, target, schema),
        queues=[main],
        tasks=[noop, reporting],
        environment=environment,
    )


@contextlib.contextmanager
def _store(kind: str) -> Iterator[tuple[str, str]]:
    """(target, schema): a SQLite file in a fresh folder, or a fresh schema."""
    if kind == "sqlite":
        with tempfile.TemporaryDirectory() as folder:
            yield str(Path(folder) / "bench.db"), ""
        return
    with bench_database("runlane_bench_observing") as dsn:
        yield dsn, f"bench_{uuid.uuid4().hex[:8]}"


# -- wait latency ----------------------------------------------------------------------


async def _waiter(kind: str, target: str, schema: str) -> None:
    """The waiting process: one open runtime; read a run id per line, wait, print when."""
    rl = _runtime(kind, target, schema)
    async with rl:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        print("ready", flush=True)
        while line := (await reader.readline()).decode().strip():
            waiting = asyncio.ensure_future(rl.runs.wait(line, timeout="30s"))
            await asyncio.sleep(0.05)  # the first read is done: the outcome must be heard
            print("waiting", flush=True)
            await waiting
            print(f"{time.time():.6f}", flush=True)


async def bench_wait(kind: str, samples: int) -> dict[str, float]:
    with _store(kind) as (target, schema):
        rl = _runtime(kind, target, schema)
        await rl.migrate()
        # The child talks over pipes line by line; blocking reads are the measurement.
        child = subprocess.Popen(  # noqa: ASYNC220
            [sys.executable, __file__, "_waiter", "--lane", kind, "--target", target,
             "--schema", schema],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )  # fmt: skip
        assert child.stdin is not None and child.stdout is not None
        latencies: list[float] = []
        try:
            assert child.stdout.readline().strip() == "ready"
            async with rl:
                for _ in range(samples):
                    run = await rl.trigger(noop, None)
                    child.stdin.write(run.id + "\n")
                    assert child.stdout.readline().strip() == "waiting"
                    assert await rl.execute_next() is not None
                    committed = time.time()
                    returned = float(child.stdout.readline())
                    latencies.append(returned - committed)
        finally:
            child.stdin.close()
            child.wait(timeout=30)
    latencies.sort()
    ms = [value * 1000 for value in latencies]
    figures = {
        "p50_ms": statistics.median(ms),
        "p90_ms": ms[int(len(ms) * 0.9)],
        "p99_ms": ms[min(len(ms) - 1, int(len(ms) * 0.99))],
        "max_ms": ms[-1],
    }
    print(
        f"wait latency, {kind}, {samples} samples: p50 {figures['p50_ms']:.2f} ms, "
        f"p90 {figures['p90_ms']:.2f} ms, p99 {figures['p99_ms']:.2f} ms, "
        f"max {figures['max_ms']:.2f} ms"
    )
    return figures


# -- progress overhead -----------------------------------------------------------------


async def _drain_rate(kind: str, which: Any, runs: int, step: float) -> float:
    with _store(kind) as (target, schema):
        rl = _runtime(kind, target, schema)
        await rl.migrate()
        async with rl:
            await rl.trigger_many(which, [step or None] * runs)
            started = time.perf_counter()
            await rl.worker(concurrency=32, mode=WorkerMode.DRAIN).run()
            elapsed = time.perf_counter() - started
            page = await rl.runs.list(statuses=["succeeded"], limit=1)
            assert page.data, "nothing drained"
    return runs / elapsed


async def bench_progress(kind: str, runs: int, rounds: int, step_ms: float) -> None:
    plain: list[float] = []
    reported: list[float] = []
    for _ in range(rounds):
        plain.append(await _drain_rate(kind, noop, runs, step_ms / 1000))
        reported.append(await _drain_rate(kind, reporting, runs, step_ms / 1000))
    base, with_reports = statistics.median(plain), statistics.median(reported)
    print(
        f"progress overhead, {kind}, {runs} runs x {rounds} rounds, tasks of ten "
        f"{step_ms:g} ms steps: without reports "
        f"{base:,.0f} runs/s, with 10 reports per run {with_reports:,.0f} runs/s, "
        f"{(1 - with_reports / base) * 100:+.1f}% slower (rounds: "
        f"{', '.join(f'{a:,.0f}/{b:,.0f}' for a, b in zip(plain, reported, strict=True))})"
    )


# -- many waiters ----------------------------------------------------------------------


async def _finisher(kind: str, target: str, schema: str) -> None:
    rl = _runtime(kind, target, schema)
    async with rl:
        await asyncio.sleep(1.0)
        await rl.worker(concurrency=32, mode=WorkerMode.DRAIN).run()


async def bench_waiters(kind: str, waiters: int) -> None:
    with _store(kind) as (target, schema):
        rl = _runtime(kind, target, schema)
        await rl.migrate()
        async with rl:
            runs = await rl.trigger_many(noop, [None] * waiters)
            cpu = time.process_time()
            waits = [asyncio.ensure_future(rl.runs.wait(run.id, timeout="60s")) for run in runs]
            await asyncio.sleep(0.2)
            listening = await _listening_connections(kind, target)
            child = subprocess.Popen(  # noqa: ASYNC220 - started once, waited for at the end
                [sys.executable, __file__, "_finisher", "--lane", kind, "--target", target,
                 "--schema", schema]
            )  # fmt: skip
            await asyncio.gather(*waits)
            used = time.process_time() - cpu
            child.wait(timeout=60)
    print(
        f"{waiters} waiters, {kind}: {listening} listening connection(s) for finished runs, "
        f"{used * 1e6 / waiters:.0f} us of the waiting process's CPU per waited run "
        "(its triggers not counted)"
    )


async def _listening_connections(kind: str, target: str) -> str:
    if kind != "postgres":
        return "0 (the file watcher)"
    import psycopg

    async with await psycopg.AsyncConnection.connect(target, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'LISTEN %runlane_finished_%'"
        )
        row = await cur.fetchone()
    return str(row[0] if row else 0)


def main_cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=["wait", "progress", "waiters", "_waiter", "_finisher"])
    parser.add_argument("--lane", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--runs", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--waiters", type=int, default=1000)
    parser.add_argument(
        "--step-ms", type=float, default=0.0, help="progress: each task's ten steps (ms)"
    )
    parser.add_argument("--target", default="")
    parser.add_argument("--schema", default="")
    args = parser.parse_args()
    if args.what == "wait":
        asyncio.run(bench_wait(args.lane, args.samples))
    elif args.what == "progress":
        asyncio.run(bench_progress(args.lane, args.runs, args.rounds, args.step_ms))
    elif args.what == "waiters":
        asyncio.run(bench_waiters(args.lane, args.waiters))
    elif args.what == "_waiter":
        asyncio.run(_waiter(args.lane, args.target, args.schema))
    else:
        asyncio.run(_finisher(args.lane, args.target, args.schema))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main_cli()
