"""What a claim costs per subscription mode (contract 5.7), on SQLite and PostgreSQL.

Times ``claim_due_runs(limit=10)`` through the storage protocol against a backlog of
queued task runs, of EXCLUSIVE deliveries and of ORDERED deliveries (``--keys`` keys
with ``--per-key`` deliveries each). Every claim's runs are settled at once, so the
next claim finds the next delivery of each key. Task runs have no key: their claims
must cost what they cost before the key rules existed.

    .venv/bin/python bench/bench_claims_by_mode.py
    .venv/bin/python bench/bench_claims_by_mode.py --lanes postgres --keys 100 --per-key 100

PostgreSQL: RUNLANE_BENCH_DATABASE_URL names a server, else a throwaway one is started.
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
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for tests.support

from tests.support.postgres_server import bench_database

from runlane import RunStatus, postgres_lane, sqlite_lane
from runlane.ports.storage import (
    LeaseRequest,
    NewDelivery,
    NewEvent,
    NewMessage,
    NewRun,
    QueuePolicy,
    RunChanges,
    Storage,
    StoresMessages,
    Transition,
)
from runlane.topics.publishing import canonical_envelope
from runlane.types.runs import RunEventType, RunSource, SubscriptionMode

MAIN = QueuePolicy("main")
CLAIMS = 50
LIMIT = 10


async def _fill_tasks(store: Storage, environment: str, count: int, now: datetime) -> None:
    runs = [
        NewRun(
            id=f"t{n:07d}",
            task_id="noop",
            queue="main",
            status=RunStatus.QUEUED,
            payload=None,
            payload_json="null",
            run_at=now,
            source=RunSource(),
        )
        for n in range(count)
    ]
    for start in range(0, count, 1_000):
        await store.create_runs(environment, runs[start : start + 1_000], now)


async def _fill_deliveries(
    store: Storage, environment: str, mode: SubscriptionMode, keys: int, per_key: int, now: datetime
) -> None:
    envelope = canonical_envelope("orders", 1, {})
    messages = [
        NewMessage(
            id=f"m{n:05d}-{k:04d}",
            topic="orders",
            payload=1,
            payload_json="1",
            attributes={},
            envelope=envelope,
            window_ends_at=now + timedelta(hours=1),
            deliveries=(NewDelivery(f"d{n:05d}-{k:04d}", "sub", "main", mode, f"key-{k}"),),
        )
        for n in range(per_key)
        for k in range(keys)
    ]
    topics = cast(StoresMessages, store)
    for start in range(0, len(messages), 500):
        await topics.publish_messages(environment, messages[start : start + 500], now)


async def _median_claim(store: Storage, environment: str, now: datetime) -> float:
    timings = []
    lease = LeaseRequest("bench", now + timedelta(minutes=5))
    for _ in range(CLAIMS):
        started = time.perf_counter()
        claimed = await store.claim_due_runs(environment, [MAIN], LIMIT, lease, now)
        timings.append(time.perf_counter() - started)
        settles = [
            Transition(
                run.id,
                run.event_sequence,
                RunChanges(RunStatus.SUCCEEDED),
                (NewEvent(RunEventType.SUCCEEDED),),
                lease_token=run.lease.token if run.lease else None,
            )
            for run in claimed
        ]
        await store.apply_transitions(environment, settles, now)
    return statistics.median(timings)


async def measure(store: Storage, keys: int, per_key: int) -> dict[str, float]:
    """Median milliseconds of one claim per backlog kind."""
    await store.migrate()
    await store.open()
    try:
        now = datetime.now(UTC)
        results = {}
        environment = f"bench-{uuid.uuid4().hex[:8]}"
        await _fill_tasks(store, environment, keys * per_key, now)
        results[f"{keys * per_key:,} task runs"] = await _median_claim(store, environment, now)
        for mode in (SubscriptionMode.EXCLUSIVE, SubscriptionMode.ORDERED):
            environment = f"bench-{uuid.uuid4().hex[:8]}"
            await _fill_deliveries(store, environment, mode, keys, per_key, now)
            label = f"{mode.value} ({keys} keys x {per_key})"
            results[label] = await _median_claim(store, environment, now)
        return {label: seconds * 1000 for label, seconds in results.items()}
    finally:
        await store.close()


def main() -> None:
    """Parse options, measure each lane, print."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lanes", default="sqlite,postgres")
    parser.add_argument("--keys", type=int, default=100)
    parser.add_argument("--per-key", type=int, default=100)
    parser.add_argument("--json", action="store_true", help="Print JSON.")
    args = parser.parse_args()
    lanes = [lane.strip() for lane in args.lanes.split(",") if lane.strip()]
    report: dict[str, Any] = {}
    with contextlib.ExitStack() as stack:
        for lane in lanes:
            if lane == "sqlite":
                folder = stack.enter_context(tempfile.TemporaryDirectory())
                store = sqlite_lane(Path(folder) / "bench.db").storage
            elif lane == "postgres":
                dsn = stack.enter_context(bench_database("runlane_bench"))
                store = postgres_lane(dsn).storage
            else:
                parser.error(f"unknown lane {lane!r} (sqlite, postgres)")
            report[lane] = asyncio.run(measure(store, args.keys, args.per_key))
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"claim_due_runs(limit={LIMIT}) median of {CLAIMS} claims, each claim's runs settled")
    for lane, results in report.items():
        for label, ms in results.items():
            print(f"{lane:<10}{label:<40}{ms:>10.2f} ms")


if __name__ == "__main__":
    main()
