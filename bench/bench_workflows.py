"""Workflows: how long a group's callback waits after its last member, and what a
release costs.

A group of ``--members`` no-op runs (10,000 by default) with a callback is drained
by one worker; the figure is the time from the last member's ``run.succeeded`` to
the callback's ``run.started`` (and ``run.succeeded``), from the stored events.
Each member's settle counts the callback down by one in its own transaction (a
counter on the waiting run, not a count of the group), so the last member's settle
costs what any member's does, and the callback is claimable right after it::

    .venv/bin/python bench/bench_workflows.py                      # SQLite
    .venv/bin/python bench/bench_workflows.py --dsn postgresql://...
    .venv/bin/python bench/bench_workflows.py --members 2000 --json

Settling a run with dependents adds, per settle batch, one statement that counts the
dependents of its settled runs down and one that resolves their edges (SQLite), or
one trigger call per settled row (PostgreSQL); the release of a dependent counted
to zero is one trigger firing. A run without dependents pays one condition in its
compare-and-set (SQLite) or the trigger's ``WHEN`` test (PostgreSQL):
``bench_instructions.py`` counts that.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from runlane import (
    Context,
    RunEventType,
    Runlane,
    WorkerMode,
    postgres_lane,
    queue,
    sqlite_lane,
    task,
)

MAIN = queue("main", default=True)


@task("bench.member", queue=MAIN)
async def member(payload: Any, ctx: Context) -> None:
    """Does nothing: the figure is the runtime's."""


@task("bench.callback", queue=MAIN)
async def callback(payload: Any, ctx: Context) -> int:
    """Reads nothing (a 10,000-member group's runs are many): counts the call."""
    return 1


async def measure(lane: Any, members: int, concurrency: int) -> dict[str, Any]:
    rl = Runlane(lane=lane, queues=[MAIN], tasks=[member, callback])
    await rl.migrate()
    async with rl:
        started = time.perf_counter()
        group = await rl.trigger_group(member, [{"n": n} for n in range(members)],
                                       then=(callback, None))  # fmt: skip
        written = time.perf_counter() - started
        worker = rl.worker(concurrency=concurrency, mode=WorkerMode.DRAIN, handle_signals=False)
        started = time.perf_counter()
        await worker.run()
        drained = time.perf_counter() - started
        assert group.callback is not None
        # The runs finish in claim order, oldest first: the last few hold the last success.
        last_member = max(
            [
                event.occurred_at
                for run in group.runs[-concurrency * 4 :]
                for event in await rl.runs.events(run.id)
                if event.type is RunEventType.SUCCEEDED
            ]
        )
        events = {e.type: e.occurred_at for e in await rl.runs.events(group.callback.id)}
        progress = await rl.groups.get(group.id)
        return {
            "members": members,
            "write_seconds": round(written, 3),
            "drain_seconds": round(drained, 3),
            "callback_start_after_last_member_ms": round(
                (events[RunEventType.STARTED] - last_member).total_seconds() * 1000, 1
            ),
            "callback_done_after_last_member_ms": round(
                (events[RunEventType.SUCCEEDED] - last_member).total_seconds() * 1000, 1
            ),
            "done": progress.done,
            "executed": worker.executed,
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--members", type=int, default=10_000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--dsn", help="a PostgreSQL DSN (default: a SQLite file)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        lane = postgres_lane(args.dsn) if args.dsn else sqlite_lane(str(Path(folder) / "w.db"))
        figures = asyncio.run(measure(lane, args.members, args.concurrency))
    if args.json:
        print(json.dumps(figures))
    else:
        for name, value in figures.items():
            print(f"{name:40} {value}")


if __name__ == "__main__":
    main()
