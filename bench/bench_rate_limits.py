"""How much of its rate a rate-limited queue reaches with a backlog (SPEC-flow 7.1).

A queue limited to ``--rate`` starts per second holds a backlog; polling workers at
their default settings drain it on the host's clock. The figure is the starts per
second the queue reached (from each run's ``run.started``, the claim that took the
token), over the whole drain and after the first burst, as a share of the limit;
the target is at least 0.9. The safety bound (at most ``count + burst - 1`` starts in
any window of one period) is checked on the same starts and printed.

    .venv/bin/python bench/bench_rate_limits.py                   # SQLite, 20/s, 5 s
    .venv/bin/python bench/bench_rate_limits.py --workers 3 --rate 50 --seconds 5
    RUNLANE_BENCH_DATABASE_URL=postgresql://... .venv/bin/python bench/bench_rate_limits.py
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
from datetime import timedelta
from pathlib import Path
from typing import Any

from runlane import (
    Context,
    Lane,
    RateLimit,
    RunEventType,
    Runlane,
    RunStatus,
    WorkerMode,
    postgres_lane,
    queue,
    sqlite_lane,
    task,
)
from runlane.types.ids import new_token


@task("paced.call")
async def paced_call(payload: Any, ctx: Context) -> None:
    return None


async def measure(
    lane_for: Any, rate: int, burst: int, seconds: float, workers: int
) -> dict[str, Any]:
    """Drain ``rate * seconds`` runs through ``workers`` polling workers (one runtime
    each, as separate processes would be) and return the rates reached."""
    limit = RateLimit(rate, per="1s", burst=burst)
    paced = queue("paced", default=True, rate_limit=limit)
    environment = f"bench-{new_token()[:8]}"
    runtimes = [
        Runlane(lane=lane_for(), queues=[paced], tasks=[paced_call], environment=environment)
        for _ in range(workers)
    ]
    await runtimes[0].migrate()
    for rl in runtimes:
        await rl.open()
    total = int(rate * seconds)
    runs = await runtimes[0].trigger_many(paced_call, [None] * total)
    built = [
        rl.worker(mode=WorkerMode.POLL, handle_signals=False, maintenance=False) for rl in runtimes
    ]
    tasks = [asyncio.create_task(worker.run()) for worker in built]
    try:
        while True:
            stats = await runtimes[0].queue_stats()
            if sum(s.counts.get(RunStatus.SUCCEEDED, 0) for s in stats) >= total:
                break
            await asyncio.sleep(0.1)
    finally:
        for worker in built:
            await worker.stop()
        await asyncio.gather(*tasks)
    starts = []
    for run in runs:
        events = await runtimes[0].runs.events(run.id)
        starts += [e.occurred_at for e in events if e.type is RunEventType.STARTED]
    starts.sort()
    for rl in runtimes:
        await rl.close()
    span = (starts[-1] - starts[0]).total_seconds()
    after_burst = (len(starts) - burst) / span if span else float("inf")
    peak = max(
        sum(1 for later in starts[i:] if later - start < timedelta(seconds=1))
        for i, start in enumerate(starts)
    )
    return {
        "rate": rate,
        "burst": burst,
        "workers": workers,
        "runs": total,
        "starts_per_second": round(after_burst, 2),
        "share_of_rate": round(after_burst / rate, 3),
        "peak_in_one_period": peak,
        "bound": rate + burst - 1,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=20)
    parser.add_argument("--burst", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    dsn = os.environ.get("RUNLANE_BENCH_DATABASE_URL")
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "bench.db"

        def lane_for() -> Lane:
            return postgres_lane(dsn) if dsn else sqlite_lane(path)

        result = asyncio.run(measure(lane_for, args.rate, args.burst, args.seconds, args.workers))
    result["lane"] = "postgres" if dsn else "sqlite"
    if args.json:
        print(json.dumps(result))
        return
    print(
        f"{result['lane']}: {result['workers']} workers, limit {args.rate}/s "
        f"(burst {args.burst}): {result['starts_per_second']} starts/s after the burst "
        f"= {result['share_of_rate']:.1%} of the rate; at most {result['peak_in_one_period']} "
        f"starts in one second (bound {result['bound']})"
    )


if __name__ == "__main__":
    main()
