"""A bounded queue's claim with a backlog, both lanes.

    .venv/bin/python bench/bench_bounded_claims.py
    .venv/bin/python bench/bench_bounded_claims.py --backlogs 1000,100000 --lanes postgres
    PYTHONPATH=../other-checkout/src .venv/bin/python bench/bench_bounded_claims.py

For each lane and backlog: ``backlog`` due runs of a queue limited to 5 at a time are
triggered, then ``rl.execute_next()`` (claim one run, execute a no-op, settle it) is
timed ``--samples`` times; the same for a queue without a limit beside it, on the same
storage, as the yardstick. Printed: median milliseconds per call, and the bounded
queue's median over the unbounded one's, measured in the same run (the machine's
swings fall on both). A queue whose runs carry concurrency keys ("keyed": 50 keys)
is measured too: its claim ranks every due run per key, so it grows with the backlog.

PostgreSQL: ``RUNLANE_BENCH_DATABASE_URL`` if set, else a throwaway server (fsync on).
SQLite: a database file in a temporary folder, the lane's defaults.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for tests.support

from tests.support.postgres_server import bench_database

from runlane import Context, Lane, Runlane, postgres_lane, queue, sqlite_lane, task

LIMIT = 5
KEYS = 50
BATCH = 20_000


async def _time_claims(rl: Runlane, queue_name: str, samples: int) -> float:
    """Median milliseconds of ``execute_next`` on ``queue_name``."""
    times = []
    for _ in range(samples):
        started = time.perf_counter()
        done = await rl.execute_next(queues=[queue_name])
        times.append((time.perf_counter() - started) * 1000)
        assert done is not None, "the backlog ran out"
    return statistics.median(times)


async def _measure(lane: Lane, backlog: int, samples: int) -> dict[str, float]:
    limited = queue("limited", concurrency_limit=LIMIT)
    keyed = queue("keyed", concurrency_limit=LIMIT)
    free = queue("free", default=True)

    @task("bench.limited", queue=limited)
    async def on_limited(payload: Any, ctx: Context) -> None:
        return None

    @task("bench.keyed", queue=keyed)
    async def on_keyed(payload: Any, ctx: Context) -> None:
        return None

    @task("bench.free", queue=free)
    async def on_free(payload: Any, ctx: Context) -> None:
        return None

    rl = Runlane(
        lane=lane,
        queues=[free, limited, keyed],
        tasks=[on_limited, on_keyed, on_free],
        environment=f"bench-{uuid.uuid4().hex[:8]}",
    )
    await rl.migrate()
    async with rl:
        for start in range(0, backlog, BATCH):
            size = min(BATCH, backlog - start)
            await rl.trigger_many(on_limited, [None] * size)
            await rl.trigger_many(on_free, [None] * size)
        for key in range(KEYS):
            await rl.trigger_many(on_keyed, [None] * (backlog // KEYS), concurrency_key=f"k{key}")
        return {
            "unbounded": await _time_claims(rl, "free", samples),
            "bounded": await _time_claims(rl, "limited", samples),
            "keyed": await _time_claims(rl, "keyed", samples),
        }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backlogs", default="1000,10000,100000")
    parser.add_argument("--lanes", default="sqlite,postgres")
    parser.add_argument("--samples", type=int, default=50)
    args = parser.parse_args()
    backlogs = [int(b) for b in args.backlogs.split(",")]
    lanes = args.lanes.split(",")
    rows: list[tuple[str, int, dict[str, float]]] = []
    with tempfile.TemporaryDirectory() as folder:
        if "sqlite" in lanes:
            for backlog in backlogs:
                path = Path(folder) / f"bounded-{backlog}.db"
                rows.append(
                    (
                        "sqlite",
                        backlog,
                        await _measure(sqlite_lane(path), backlog, args.samples),
                    )
                )
        if "postgres" in lanes:
            with bench_database("runlane_bench_bounded") as dsn:
                for backlog in backlogs:
                    schema = f"bounded_{uuid.uuid4().hex[:8]}"
                    rows.append(
                        (
                            "postgres",
                            backlog,
                            await _measure(
                                postgres_lane(dsn, schema=schema), backlog, args.samples
                            ),
                        )
                    )
    print(
        f"{'lane':9} {'due runs':>9} {'unbounded ms':>13} {'bounded ms':>11} {'/ unb.':>7} "
        f"{'keyed ms':>9} {'/ unb.':>7}"
    )
    for lane, backlog, m in rows:
        print(
            f"{lane:9} {backlog:>9,} {m['unbounded']:>13.2f} {m['bounded']:>11.2f} "
            f"{m['bounded'] / m['unbounded']:>7.2f} {m['keyed']:>9.2f} "
            f"{m['keyed'] / m['unbounded']:>7.2f}"
        )


if __name__ == "__main__":
    asyncio.run(main())
