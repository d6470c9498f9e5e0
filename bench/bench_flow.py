"""Flow control figures (SPEC-flow 7.1): the rate a limited queue reaches, and the cost
of a claim on a queue limited per key with many exhausted keys.

``rate``: polling workers at default settings drain a backlog of a queue limited to
``--rate`` starts a second (as a whole, and per key with ``--keys`` keys each limited
to that rate) for ``--seconds``; the figure is the starts per second after the first
burst (from each run's ``run.started``, the claim that took the token) as a share of
the limit, per partition; the target is at least 0.9. The most starts of one partition
in any one-second window is printed beside its bound (count + burst - 1).

``claim``: a queue limited per key (one start an hour) holds one due run of each of
``--exhausted`` keys that already spent their token, older than the due runs of ten
keys with tokens. The figure is the median time of a claim of ten runs (which must
return the free keys' runs), beside the same claim with ten exhausted keys; the ratio
shows whether the claim stays flat as exhausted keys pile up ahead. Both claims run in
turns in one process on one store (two environments), after the set-up's dead row
versions were vacuumed (PostgreSQL), as autovacuum keeps a live server.

    .venv/bin/python bench/bench_flow.py rate                       # SQLite
    .venv/bin/python bench/bench_flow.py claim --exhausted 10000
    .venv/bin/python bench/bench_flow.py claim --postgres           # a throwaway server
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg

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
from runlane.ports.storage import LeaseRequest, QueuePolicy
from runlane.types.ids import new_token


@task("flow.call")
async def call(payload: Any, ctx: Context) -> None:
    return None


def _tenant(payload: Any) -> str:
    return str(payload["key"])


async def measure_rate(
    lane_for: Callable[[], Lane], rate: int, burst: int, seconds: float, workers: int, keys: int
) -> dict[str, Any]:
    """Drain a backlog of ``rate * seconds`` runs per partition through ``workers``
    polling workers (one runtime each, as separate processes would be): one partition
    when ``keys`` is 0 (the whole queue), else ``keys`` keys of a queue limited per key."""
    limit = RateLimit(rate, per="1s", burst=burst)
    paced = queue("paced", default=True, rate_limit=limit, rate_limit_by="key" if keys else None)
    environment = f"bench-{new_token()[:8]}"
    runtimes = [
        Runlane(lane=lane_for(), queues=[paced], tasks=[call], environment=environment)
        for _ in range(workers)
    ]
    await runtimes[0].migrate()
    for rl in runtimes:
        await rl.open()
    per_partition = int(rate * seconds)
    names = [f"k{i}" for i in range(keys)] or [""]
    payloads = [{"key": name} for _ in range(per_partition) for name in names]
    runs = await runtimes[0].trigger_many(call, payloads, rate_key=_tenant if keys else None)
    built = [
        rl.worker(mode=WorkerMode.POLL, handle_signals=False, maintenance=False) for rl in runtimes
    ]
    tasks = [asyncio.create_task(worker.run()) for worker in built]
    try:
        while True:
            stats = await runtimes[0].queue_stats()
            if sum(s.counts.get(RunStatus.SUCCEEDED, 0) for s in stats) >= len(runs):
                break
            await asyncio.sleep(0.1)
    finally:
        for worker in built:
            await worker.stop()
        await asyncio.gather(*tasks)
    starts: dict[str, list[datetime]] = defaultdict(list)
    for run in runs:
        events = await runtimes[0].runs.events(run.id)
        starts[run.rate_key or ""] += [
            e.occurred_at for e in events if e.type is RunEventType.STARTED
        ]
    for rl in runtimes:
        await rl.close()
    shares, peaks, late = [], [], []
    interval = 1 / rate
    for times in starts.values():
        times.sort()
        # How late each start after the first burst came after the previous one's
        # token interval: with burst 1 that time is lost for good.
        late += [
            (later - earlier).total_seconds() - interval
            for earlier, later in zip(times[burst - 1 :], times[burst:], strict=False)
        ]
        span = (times[-1] - times[0]).total_seconds()
        shares.append((len(times) - burst) / span / rate if span else float("inf"))
        peaks.append(
            max(
                sum(1 for later in times[i:] if later - start < timedelta(seconds=1))
                for i, start in enumerate(times)
            )
        )
    return {
        "partitions": len(starts),
        "rate": rate,
        "burst": burst,
        "workers": workers,
        "seconds": seconds,
        "share_of_rate_min": round(min(shares), 3),
        "share_of_rate_mean": round(statistics.fmean(shares), 3),
        "peak_in_one_period": max(peaks),
        "late_ms_median": round(statistics.median(late) * 1000, 2),
        "late_ms_mean": round(statistics.fmean(late) * 1000, 2),
        # Starts that came a whole interval or more late: a token passed unclaimed.
        "late_by_an_interval": sum(1 for gap in late if gap >= interval),
        "bound": rate + burst - 1,
    }


async def _exhausted_queue(lane: Lane, exhausted: int) -> tuple[Runlane, QueuePolicy]:
    """A runtime (an environment of its own) whose queue limited per key (one start an
    hour) holds one due run of each of ``exhausted`` keys that spent their token."""
    tenants = queue("tenants", default=True, rate_limit="1/h", rate_limit_by="key")
    policy = QueuePolicy("tenants", rate_limit=tenants.rate_limit, rate_keyed=True)
    rl = Runlane(lane=lane, queues=[tenants], tasks=[call], environment=f"b-{new_token()[:8]}")
    await rl.migrate()
    await rl.open()
    # Two runs per exhausted key: the first takes its token, the second waits.
    keys = [{"key": f"busy-{i}"} for i in range(exhausted)]
    await rl.trigger_many(call, keys + keys, rate_key=_tenant)
    lease = LeaseRequest("bench", rl.clock.now() + timedelta(hours=1))
    while await rl.storage.claim_due_runs(rl.environment, [policy], 500, lease, rl.clock.now()):
        pass
    return rl, policy


async def _claim_free_keys(rl: Runlane, policy: QueuePolicy, round_number: int) -> float:
    """Seconds of one claim of ten runs, after ten fresh keys' runs became due."""
    free = [{"key": f"free-{round_number}-{i}"} for i in range(10)]
    await rl.trigger_many(call, free, rate_key=_tenant)
    lease = LeaseRequest("bench", rl.clock.now() + timedelta(hours=1))
    started = time.perf_counter()
    claimed = await rl.storage.claim_due_runs(rl.environment, [policy], 10, lease, rl.clock.now())
    elapsed = time.perf_counter() - started
    assert len(claimed) == 10, len(claimed)
    assert all((run.rate_key or "").startswith("free-") for run in claimed)
    return elapsed


async def measure_claim(
    lane_for: Callable[[], Lane], exhausted: int, rounds: int, vacuum: Callable[[], None]
) -> tuple[float, float]:
    """Median seconds of a claim of ten free keys' runs with ten exhausted keys, and
    with ``exhausted`` of them, in two environments of one store (so both read the same
    tables), measured in turns so that both see the same load."""
    few, few_policy = await _exhausted_queue(lane_for(), 10)
    many, many_policy = await _exhausted_queue(lane_for(), exhausted)
    # The steady state: the dead row versions the set-up left are vacuumed as they are
    # on a live server, and the planner has statistics.
    vacuum()
    timings: dict[str, list[float]] = {"few": [], "many": []}
    try:
        # The first rounds warm the connections and statement caches: not counted.
        for round_number in range(rounds + 3):
            for name, rl, policy in (("few", few, few_policy), ("many", many, many_policy)):
                elapsed = await _claim_free_keys(rl, policy, round_number)
                if round_number >= 3:
                    timings[name].append(elapsed)
        assert sum(s.due for s in await many.queue_stats()) == exhausted
    finally:
        await few.close()
        await many.close()
    return statistics.median(timings["few"]), statistics.median(timings["many"])


@contextlib.contextmanager
def _lanes(postgres: bool) -> Iterator[tuple[Callable[[], Lane], Callable[[], None]]]:
    """A factory of lanes on one store (a fresh SQLite file, or a throwaway PostgreSQL
    database of ``tests.support.postgres_server``) and what vacuums it."""
    if postgres:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for tests.support
        from tests.support.postgres_server import bench_database

        with bench_database("runlane_bench_flow") as dsn:

            def vacuum() -> None:
                with psycopg.connect(dsn, autocommit=True) as conn:
                    conn.execute("VACUUM ANALYZE runlane.runlane_runs")
                    conn.execute("VACUUM ANALYZE runlane.runlane_rate_limits")

            yield (lambda: postgres_lane(dsn)), vacuum
        return
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "bench.db"
        yield (lambda: sqlite_lane(path)), (lambda: None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("figure", choices=["rate", "claim"])
    parser.add_argument("--postgres", action="store_true")
    parser.add_argument("--rate", type=int, default=20)
    parser.add_argument("--burst", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--keys", type=int, default=5)
    parser.add_argument(
        "--keyed-only", action="store_true", help="rate: skip the whole-queue measure"
    )
    parser.add_argument("--exhausted", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    lane_name = "postgres" if args.postgres else "sqlite"
    results: list[dict[str, Any]] = []
    with _lanes(args.postgres) as (lane_for, vacuum):
        if args.figure == "rate":
            # --keys 0: the whole queue once; --keyed-only: the keys without it.
            sizes = (args.keys,) if args.keyed_only and args.keys else (0, args.keys)
            for keys in dict.fromkeys(sizes):
                result = asyncio.run(
                    measure_rate(lane_for, args.rate, args.burst, args.seconds, args.workers, keys)
                )
                results.append({"lane": lane_name, "keyed": bool(keys), **result})
        else:
            few, many = asyncio.run(measure_claim(lane_for, args.exhausted, args.rounds, vacuum))
            results.append(
                {
                    "lane": lane_name,
                    "claim_ms_10_exhausted": round(few * 1000, 3),
                    f"claim_ms_{args.exhausted}_exhausted": round(many * 1000, 3),
                    "ratio": round(many / few, 3),
                }
            )
    if args.json:
        print(json.dumps(results))
        return
    for result in results:
        if args.figure == "rate":
            what = f"{result['partitions']} keys" if result["keyed"] else "the whole queue"
            print(
                f"{lane_name}: {what}, {result['workers']} workers, {args.rate}/s each "
                f"(burst {args.burst}) for {args.seconds:g} s: "
                f"{result['share_of_rate_min']:.1%} of the rate at least "
                f"({result['share_of_rate_mean']:.1%} on average); at most "
                f"{result['peak_in_one_period']} starts of one partition in one second "
                f"(bound {result['bound']}); a start {result['late_ms_median']} ms "
                f"after its token at the median ({result['late_ms_mean']} ms on average), "
                f"{result['late_by_an_interval']} a whole interval or more"
            )
        else:
            print(
                f"{lane_name}: a claim of 10 runs with 10 exhausted keys "
                f"{result['claim_ms_10_exhausted']} ms, with {args.exhausted} "
                f"{result[f'claim_ms_{args.exhausted}_exhausted']} ms "
                f"(ratio {result['ratio']})"
            )


if __name__ == "__main__":
    main()
