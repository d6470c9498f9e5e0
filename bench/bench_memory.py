"""A worker's memory while it drains many runs on SQLite: does its RSS stay flat?

The script fills a fresh SQLite file with ``--runs`` queued no-op runs (bulk
triggers of 10,000, from this process), then starts one worker process on it
(``WorkerMode.DRAIN``, ``--concurrency`` slots, default settings otherwise) that
samples its own resident set size (``VmRSS`` from ``/proc/self/status``) about
once a second while it works, and prints:

- ``start``: RSS with the runtime open, before the first claim;
- ``warm``: RSS once ``--warm`` of the runs (10 % by default) are done, when
  caches, pools and the allocator's arenas have reached their working size;
- ``end``: RSS after the last run, and ``peak`` over the whole drain;
- ``growth``: end minus warm, in bytes and per thousand runs executed after warm.

A worker that kept something per run (a record of each run, an ever-growing
set of ids, unreleased futures) would grow by that much per run; a flat worker
ends where it was once warm, give or take allocator noise.

    .venv/bin/python bench/bench_memory.py                 # 1,000,000 runs
    .venv/bin/python bench/bench_memory.py --runs 100000 --json
    .venv/bin/python bench/bench_memory.py --dir /mnt/fast  # where the file goes

Linux only (``/proc``). The file is deleted afterwards unless ``--keep``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from runlane import Context, Runlane, WorkerMode, queue, sqlite_lane, task

DEFAULT_RUNS = 1_000_000
FILL_BATCH = 10_000
SAMPLE_SECONDS = 1.0

bench_queue = queue("bench", default=True)


@task("bench.noop")
async def noop(payload: Any, ctx: Context) -> None:
    """Does nothing: the benchmark measures the runtime, not the task."""


def _runtime(path: Path) -> Runlane:
    return Runlane(lane=sqlite_lane(path), queues=[bench_queue], tasks=[noop])


def rss_bytes() -> int:
    """This process's resident set size now (``VmRSS``)."""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise SystemExit("no VmRSS in /proc/self/status (Linux only)")


async def fill(path: Path, runs: int) -> float:
    """Queue ``runs`` no-op runs; seconds it took."""
    started = time.perf_counter()
    async with _runtime(path) as rl:
        for start in range(0, runs, FILL_BATCH):
            count = min(FILL_BATCH, runs - start)
            await rl.trigger_many(noop, [{"n": n} for n in range(start, start + count)])
    return time.perf_counter() - started


async def drain(path: Path, runs: int, concurrency: int, warm_fraction: float) -> dict[str, Any]:
    """Run a DRAIN worker over ``path``, sampling RSS; the figures as a dict."""
    async with _runtime(path) as rl:
        worker = rl.worker(mode=WorkerMode.DRAIN, concurrency=concurrency, handle_signals=False)
        start = rss_bytes()
        samples: list[tuple[float, int, int]] = []
        warm_after = int(runs * warm_fraction)
        warm: int | None = None
        began = time.perf_counter()

        async def sample() -> None:
            nonlocal warm
            while True:
                executed, rss = worker.executed, rss_bytes()
                samples.append((time.perf_counter() - began, executed, rss))
                if warm is None and executed >= warm_after:
                    warm = rss
                await asyncio.sleep(SAMPLE_SECONDS)

        sampler = asyncio.ensure_future(sample())
        try:
            await worker.run()
        finally:
            sampler.cancel()
        elapsed = time.perf_counter() - began
        end = rss_bytes()
        samples.append((elapsed, worker.executed, end))
        warm_rss = warm if warm is not None else start
        after_warm = max(1, worker.executed - warm_after)
        return {
            "runs": runs,
            "executed": worker.executed,
            "concurrency": concurrency,
            "seconds": round(elapsed, 1),
            "runs_per_second": round(worker.executed / elapsed),
            "start_rss": start,
            "warm_rss": warm_rss,
            "end_rss": end,
            "peak_rss": max(rss for _, _, rss in samples),
            "growth_bytes": end - warm_rss,
            "growth_bytes_per_1000_runs": round((end - warm_rss) * 1000 / after_warm, 1),
            "samples": [[round(t, 1), n, rss] for t, n, rss in samples],
        }


def _mib(value: int) -> str:
    return f"{value / 2**20:,.1f} MiB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=DEFAULT_RUNS)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--warm", type=float, default=0.1, help="share of runs before 'warm'")
    parser.add_argument("--dir", type=Path, default=None, help="where the database file goes")
    parser.add_argument("--keep", action="store_true", help="keep the database file")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--worker", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.worker is not None:  # the child: drain and report on stdout
        report = asyncio.run(drain(args.worker, args.runs, args.concurrency, args.warm))
        print(json.dumps(report))
        return

    folder = Path(tempfile.mkdtemp(prefix="runlane-memory-", dir=args.dir))
    path = folder / "memory.db"
    try:
        fill_seconds = asyncio.run(fill(path, args.runs))
        child = subprocess.run(
            [
                sys.executable,
                __file__,
                "--worker",
                str(path),
                "--runs",
                str(args.runs),
                "--concurrency",
                str(args.concurrency),
                "--warm",
                str(args.warm),
            ],
            check=True,
            capture_output=True,
            text=True,
        )
        report = json.loads(child.stdout.strip().splitlines()[-1])
        report["fill_seconds"] = round(fill_seconds, 1)
        report["file_bytes"] = path.stat().st_size
    finally:
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)

    if args.json:
        print(json.dumps(report))
        return
    print(f"filled {args.runs:,} runs in {report['fill_seconds']} s")
    print(
        f"drained {report['executed']:,} runs in {report['seconds']} s "
        f"({report['runs_per_second']:,}/s, {report['concurrency']} slots)"
    )
    for name in ("start", "warm", "end", "peak"):
        print(f"  {name:>5} RSS  {_mib(report[f'{name}_rss'])}")
    print(
        f"  growth after warm: {report['growth_bytes'] / 1024:,.0f} KiB "
        f"({report['growth_bytes_per_1000_runs']:,.1f} bytes per 1,000 runs)"
    )
    if report["executed"] != args.runs:
        raise SystemExit(f"the worker executed {report['executed']} of {args.runs} runs")


if __name__ == "__main__":
    main()
