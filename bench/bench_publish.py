"""Publishing to a stored topic beside ``trigger`` and ``trigger_many`` of as many runs.

A publish stores the message and one delivery run per matching subscription in
one transaction. This measures messages per second and delivery runs per second
for topics with 1 and with 5 matching subscriptions, and, in the same process on
the same kind of store, the same number of runs created two ways: ``trigger``
called as the publishes are (one run per call, so ``fan_out`` calls per message)
and ``trigger_many`` of them all. Publishes and triggers are awaited one after
another (``sequential``) and also ``--concurrency`` at a time (``concurrent``).
Two ratios: deliveries/s ÷ ``trigger`` runs/s in the same calling pattern, and
deliveries/s ÷ ``trigger_many`` runs/s (which writes up to 1,000 runs per
transaction, so it is the ceiling). Every measurement gets a fresh SQLite file
or PostgreSQL environment.

    .venv/bin/python bench/bench_publish.py                   # SQLite and PostgreSQL
    .venv/bin/python bench/bench_publish.py --messages 500 --json
    .venv/bin/python bench/bench_publish.py --rounds 3          # medians of 3 rounds
    .venv/bin/python bench/bench_publish.py --lanes sqlite
    RUNLANE_BENCH_DATABASE_URL=postgresql://... .venv/bin/python bench/bench_publish.py
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
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for tests.support

from runlane import (
    Context,
    DeliveryContext,
    Lane,
    Message,
    Runlane,
    postgres_lane,
    queue,
    sqlite_lane,
    subscription,
    task,
    topic,
)

DEFAULT_MESSAGES = 2000
DEFAULT_CONCURRENCY = 16
FAN_OUTS = (1, 5)

bench_queue = queue("bench", default=True)
orders = topic("bench.orders")


async def _handle(message: Message[Any], ctx: DeliveryContext) -> None:
    """Never called: only publishing is measured."""


@task("bench.noop")
async def noop(payload: Any, ctx: Context) -> None:
    """Never called: only triggering is measured."""


SUBSCRIPTIONS = [subscription(f"bench.sub{i}", topic=orders, handler=_handle) for i in range(5)]


def _runtime(lane: Lane, fan_out: int, environment: str) -> Runlane:
    return Runlane(
        lane=lane,
        queues=[bench_queue],
        tasks=[noop],
        topics=[orders],
        subscriptions=SUBSCRIPTIONS[:fan_out],
        environment=environment,
    )


async def _measure_one(
    lane_factory: Callable[[], Lane], fan_out: int, messages: int, concurrency: int
) -> dict[str, float]:
    """Seconds for each way of producing ``messages * fan_out`` runs."""
    timings: dict[str, float] = {}
    payloads = [{"order": n, "note": "x" * 40} for n in range(messages)]

    async def fresh() -> Runlane:
        rl = _runtime(lane_factory(), fan_out, f"bench-{uuid.uuid4().hex[:10]}")
        await rl.migrate()
        await rl.open()
        return rl

    rl = await fresh()
    try:
        started = time.perf_counter()
        for payload in payloads:
            await rl.publish(orders, payload)
        timings["publish_sequential"] = time.perf_counter() - started
    finally:
        await rl.close()

    rl = await fresh()
    try:
        gate = asyncio.Semaphore(concurrency)

        async def one(payload: dict[str, Any]) -> None:
            async with gate:
                await rl.publish(orders, payload)

        started = time.perf_counter()
        await asyncio.gather(*(one(payload) for payload in payloads))
        timings["publish_concurrent"] = time.perf_counter() - started
    finally:
        await rl.close()

    runs = [payload for payload in payloads for _ in range(fan_out)]
    rl = await fresh()
    try:
        started = time.perf_counter()
        for run in runs:
            await rl.trigger(noop, run)
        timings["trigger_sequential"] = time.perf_counter() - started
    finally:
        await rl.close()

    rl = await fresh()
    try:
        gate = asyncio.Semaphore(concurrency)

        async def trigger_one(run: dict[str, Any]) -> None:
            async with gate:
                await rl.trigger(noop, run)

        started = time.perf_counter()
        await asyncio.gather(*(trigger_one(run) for run in runs))
        timings["trigger_concurrent"] = time.perf_counter() - started
    finally:
        await rl.close()

    rl = await fresh()
    try:
        started = time.perf_counter()
        await rl.trigger_many(noop, runs)
        timings["trigger_many"] = time.perf_counter() - started
    finally:
        await rl.close()
    return timings


async def measure(
    lanes: dict[str, Callable[[], Lane]], messages: int, concurrency: int, rounds: int = 1
) -> dict[str, Any]:
    """Every lane and fan-out: messages/s, deliveries/s and the ratios to trigger and
    trigger_many."""
    result: dict[str, Any] = {
        "messages": messages,
        "concurrency": concurrency,
        "rounds": rounds,
        "lanes": {},
    }
    for name, factory in lanes.items():
        per_lane: dict[str, Any] = {}
        for fan_out in FAN_OUTS:
            # Each round measures every way once, one after another, so a slow spell of
            # the machine hits all of them; the median of each way is kept.
            taken = [
                await _measure_one(factory, fan_out, messages, concurrency) for _ in range(rounds)
            ]
            seconds = {way: statistics.median(t[way] for t in taken) for way in taken[0]}
            runs = messages * fan_out
            trigger_rate = runs / seconds["trigger_many"]
            entry: dict[str, Any] = {"trigger_many_runs_per_s": round(trigger_rate, 1)}
            for way in ("sequential", "concurrent"):
                took = seconds[f"publish_{way}"]
                trigger_way = runs / seconds[f"trigger_{way}"]
                entry[way] = {
                    "messages_per_s": round(messages / took, 1),
                    "deliveries_per_s": round(runs / took, 1),
                    "trigger_runs_per_s": round(trigger_way, 1),
                    "ratio_to_trigger": round(runs / took / trigger_way, 3),
                    "ratio_to_trigger_many": round(runs / took / trigger_rate, 3),
                }
            per_lane[f"{fan_out}_subscriptions"] = entry
        result["lanes"][name] = per_lane
    return result


def _print(result: dict[str, Any]) -> None:
    print(
        f"publish throughput: {result['messages']:,} messages per measurement, "
        f"concurrent = {result['concurrency']} calls in flight, "
        f"median of {result['rounds']} round(s)"
    )
    header = (
        f"{'lane':<10} {'subs':>4} {'how':<11} {'messages/s':>11} {'deliveries/s':>13} "
        f"{'trigger runs/s':>15} {'ratio':>6} {'trigger_many runs/s':>20} {'ratio':>6}"
    )
    print(header)
    print("-" * len(header))
    for lane, per_lane in result["lanes"].items():
        for key, entry in per_lane.items():
            subs = key.split("_")[0]
            for way in ("sequential", "concurrent"):
                figures = entry[way]
                print(
                    f"{lane:<10} {subs:>4} {way:<11} {figures['messages_per_s']:>11,.0f} "
                    f"{figures['deliveries_per_s']:>13,.0f} "
                    f"{figures['trigger_runs_per_s']:>15,.0f} "
                    f"{figures['ratio_to_trigger']:>6.2f} "
                    f"{entry['trigger_many_runs_per_s']:>20,.0f} "
                    f"{figures['ratio_to_trigger_many']:>6.2f}"
                )


def main() -> None:
    """Parse options, start a PostgreSQL server unless one is given, measure, print."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=DEFAULT_MESSAGES)
    parser.add_argument("--concurrency", type=int, default=DEFAULT_CONCURRENCY)
    parser.add_argument("--rounds", type=int, default=1, help="Median of this many rounds.")
    parser.add_argument("--lanes", default="sqlite,postgres", help="sqlite, postgres or both.")
    parser.add_argument("--json", action="store_true", help="Print JSON.")
    args = parser.parse_args()
    chosen = [name.strip() for name in args.lanes.split(",") if name.strip()]
    if not chosen or not set(chosen) <= {"sqlite", "postgres"}:
        parser.error("--lanes takes sqlite, postgres or sqlite,postgres")
    with contextlib.ExitStack() as stack:
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="runlane-bench-")))
        lanes: dict[str, Callable[[], Lane]] = {}
        if "sqlite" in chosen:
            # One file per measurement: each lane built gets a new one.
            lanes["sqlite"] = lambda: sqlite_lane(folder / f"{uuid.uuid4().hex}.db")
        if "postgres" in chosen:
            from tests.support.postgres_server import bench_database

            dsn = stack.enter_context(bench_database("runlane_bench"))
            lanes["postgres"] = lambda: postgres_lane(dsn)
        result = asyncio.run(
            measure(lanes, max(1, args.messages), max(1, args.concurrency), max(1, args.rounds))
        )
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        _print(result)


if __name__ == "__main__":
    main()
