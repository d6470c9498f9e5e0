"""Runlane on PostgreSQL beside raw psycopg: bulk and single trigger, drain, latency.

Each Runlane figure is printed beside a raw-SQL limit measured in the same run on
the same server: pgbench-style statements on a bare jobs table (one jsonb payload
column, a partial index on queued jobs), sent with psycopg the way a hand-written
queue would, one job at a time and in batches. Runlane does more per run than
the raw statements: it validates payloads, keeps the full event history (created,
started, succeeded), takes leases with fencing tokens, and runs each attempt as
an asyncio task beside a heartbeat. Default durability (fsync on).

    .venv/bin/python bench/bench_postgres.py                  # own throwaway server
    .venv/bin/python bench/bench_postgres.py --json
    .venv/bin/python bench/bench_postgres.py --claim-scaling  # + claim cost at 10k / 1M
    .venv/bin/python bench/bench_postgres.py --only drain,latency  # some measurements
    .venv/bin/python bench/bench_postgres.py --repeat 5       # medians of 5 rounds (default 3)
    RUNLANE_BENCH_DATABASE_URL=postgresql://... .venv/bin/python bench/bench_postgres.py
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for tests.support

from tests.support.postgres_server import bench_database

from runlane import Context, Runlane, WorkerMode, postgres_lane, queue, task
from runlane.ports.storage import LeaseRequest

BULK_RUNS = 20_000
SINGLE_RUNS = 2_000
DRAIN_RUNS = 20_000
#: The raw one-job-at-a-time drain is slow; a sample of this many jobs gives its rate.
RAW_SINGLE_DRAIN_RUNS = 2_000
LATENCY_RUNS = 500
LATENCY_RATE = 100.0
DEFAULT_CONCURRENCY = 100
#: Producers triggering at once in the concurrent single-trigger measurement.
PRODUCERS = 10
#: Rounds of every measurement (interleaved with its raw twin); rates are medians.
DEFAULT_REPEAT = 3
#: Jobs per statement in the raw batched loops (as trigger_many writes 1,000 per call).
RAW_INSERT_BATCH = 1_000
RAW_CLAIM_BATCH = 100

bench_queue = queue("bench", default=True)
#: Handler start times by payload id, for the latency measurement.
STARTS: dict[int, float] = {}
#: Set once the latency measurement's last run started.
LAST_STARTED = asyncio.Event()


@task("bench.noop")
async def noop(payload: Any, ctx: Context) -> None:
    """Does nothing: the benchmark measures the runtime, not the task."""


@task("bench.timed")
async def timed(payload: dict[str, Any], ctx: Context) -> None:
    """Records when it started."""
    STARTS[payload["n"]] = time.perf_counter()
    if len(STARTS) == LATENCY_RUNS:
        LAST_STARTED.set()


def _payloads(runs: int) -> list[dict[str, int]]:
    return [{"n": n} for n in range(runs)]


@contextlib.asynccontextmanager
async def _runtime(dsn: str, schema: str, **options: Any) -> AsyncIterator[Runlane]:
    rl = Runlane(
        lane=postgres_lane(dsn, schema=schema, **options),
        queues=[bench_queue],
        tasks=[noop, timed],
        environment="bench",
    )
    await rl.migrate()
    async with rl:
        yield rl


# -- Runlane -------------------------------------------------------------------------


async def runlane_bulk_trigger(dsn: str, schema: str, runs: int) -> float:
    """Seconds for ``trigger_many`` of ``runs`` payloads (1,000 per round trip)."""
    async with _runtime(dsn, schema) as rl:
        payloads = _payloads(runs)
        started = time.perf_counter()
        await rl.trigger_many(noop, payloads)
        return time.perf_counter() - started


async def runlane_single_trigger(dsn: str, schema: str, runs: int, producers: int = 1) -> float:
    """Seconds for ``runs`` awaited ``trigger`` calls, ``producers`` of them at a time."""
    async with _runtime(dsn, schema) as rl:
        payloads = _payloads(runs)

        async def produce(share: list[dict[str, int]]) -> None:
            for payload in share:
                await rl.trigger(noop, payload)

        started = time.perf_counter()
        await asyncio.gather(*(produce(payloads[i::producers]) for i in range(producers)))
        return time.perf_counter() - started


async def runlane_drain(dsn: str, schema: str, runs: int, concurrency: int) -> float:
    """Seconds for one DRAIN worker to execute ``runs`` queued no-op runs."""
    async with _runtime(dsn, schema, max_size=10) as rl:
        await rl.trigger_many(noop, _payloads(runs))
        worker = rl.worker(mode=WorkerMode.DRAIN, concurrency=concurrency, handle_signals=False)
        started = time.perf_counter()
        await worker.run()
        elapsed = time.perf_counter() - started
        if worker.executed != runs:
            raise SystemExit(f"runlane executed {worker.executed} of {runs} runs")
        return elapsed


@dataclass
class Latency:
    """Seconds per job of one latency round: the enqueue call, and from the call's
    start to the job's start (the claim side is the difference)."""

    enqueue: list[float] = field(default_factory=list)
    total: list[float] = field(default_factory=list)

    def extend(self, other: Latency) -> None:
        """Pool another round's samples."""
        self.enqueue += other.enqueue
        self.total += other.total

    def after_enqueue(self) -> list[float]:
        """From the enqueue call's return to the job's start, per job."""
        return [total - call for call, total in zip(self.enqueue, self.total, strict=True)]


async def runlane_latency(dsn: str, schema: str, runs: int, rate: float) -> Latency:
    """Trigger→handler-start seconds with an idle polling worker, triggers from another
    runtime (its own pool, as another process would be) at ``rate`` per second."""
    STARTS.clear()
    LAST_STARTED.clear()
    async with _runtime(dsn, schema) as consumer, _runtime(dsn, schema) as producer:
        worker = consumer.worker(concurrency=10, handle_signals=False)
        running = asyncio.create_task(worker.run())
        await asyncio.sleep(1.0)  # idle: the worker waits on notifications
        sent: dict[int, tuple[float, float]] = {}
        loop = asyncio.get_running_loop()
        begin = loop.time()
        for n in range(runs):
            await asyncio.sleep(max(0.0, begin + n / rate - loop.time()))
            call = time.perf_counter()
            await producer.trigger(timed, {"n": n})
            sent[n] = (call, time.perf_counter() - call)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(LAST_STARTED.wait(), 10)
        await worker.stop()
        await running
    started = [(n, call, took) for n, (call, took) in sent.items() if n in STARTS]
    return Latency(
        enqueue=[took for _, _, took in started],
        total=[STARTS[n] - call for n, call, _ in started],
    )


# -- raw psycopg -----------------------------------------------------------------------

RAW_SCHEMA = """
CREATE TABLE {table} (
    id BIGSERIAL PRIMARY KEY, queue TEXT NOT NULL, status TEXT NOT NULL,
    payload JSONB NOT NULL, run_at BIGINT NOT NULL, lease_token TEXT, updated_at BIGINT
);
CREATE INDEX ON {table} (queue, run_at, id) WHERE status = 'queued';
"""
RAW_INSERT_ONE = (
    "INSERT INTO {table} (queue, status, payload, run_at) VALUES ('bench', 'queued', %s, %s)"
)
RAW_INSERT_MANY = (
    "INSERT INTO {table} (queue, status, payload, run_at) "
    "SELECT 'bench', 'queued', p::jsonb, %s FROM unnest(%s::text[]) AS p"
)
RAW_CLAIM = """
UPDATE {table} SET status = 'running', lease_token = %s, updated_at = %s
WHERE id IN (
    SELECT id FROM {table} WHERE queue = 'bench' AND status = 'queued' AND run_at <= %s
    ORDER BY run_at, id LIMIT %s FOR UPDATE SKIP LOCKED
)
RETURNING id
"""
RAW_COMPLETE = "UPDATE {table} SET status = 'succeeded', updated_at = %s WHERE id = ANY(%s)"
RAW_INSERT_NOTIFY = (
    "WITH j AS (INSERT INTO {table} (queue, status, payload, run_at) "
    "VALUES ('bench', 'queued', %s, %s) RETURNING id) SELECT pg_notify('raw_bench', '') FROM j"
)


def _micros() -> int:
    return time.time_ns() // 1000


@contextlib.contextmanager
def _raw_table(dsn: str) -> Iterator[sql.Identifier]:
    table = sql.Identifier(f"raw_{uuid.uuid4().hex[:8]}")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(_q(RAW_SCHEMA, table))
    try:
        yield table
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP TABLE {}").format(table))


def _q(template: str, table: sql.Identifier) -> sql.Composed:
    return sql.SQL(template).format(table=table)


async def _fill(conn: psycopg.AsyncConnection[Any], table: Any, runs: int) -> None:
    payloads = [json.dumps(p) for p in _payloads(runs)]
    for start in range(0, runs, RAW_INSERT_BATCH):
        await conn.execute(
            _q(RAW_INSERT_MANY, table), (_micros(), payloads[start : start + RAW_INSERT_BATCH])
        )


async def raw_insert(dsn: str, runs: int, batch: int, producers: int = 1) -> float:
    """Seconds to insert ``runs`` jobs, ``batch`` per autocommit statement, ``producers``
    connections at a time."""
    payloads = [json.dumps(p) for p in _payloads(runs)]
    with _raw_table(dsn) as table:
        conns = [
            await psycopg.AsyncConnection.connect(dsn, autocommit=True) for _ in range(producers)
        ]

        async def produce(conn: psycopg.AsyncConnection[Any], share: list[str]) -> None:
            if batch == 1:
                statement = _q(RAW_INSERT_ONE, table)
                for payload in share:
                    await conn.execute(statement, (payload, _micros()))
            else:
                statement = _q(RAW_INSERT_MANY, table)
                for start in range(0, len(share), batch):
                    await conn.execute(statement, (_micros(), share[start : start + batch]))

        started = time.perf_counter()
        await asyncio.gather(
            *(produce(conn, payloads[i::producers]) for i, conn in enumerate(conns))
        )
        elapsed = time.perf_counter() - started
        for conn in conns:
            await conn.close()
        return elapsed


async def raw_drain(dsn: str, runs: int, batch: int) -> float:
    """Seconds to claim (SKIP LOCKED) and complete ``runs`` queued jobs, ``batch`` at a time."""
    with _raw_table(dsn) as table:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            await _fill(conn, table, runs)
            claim, complete = _q(RAW_CLAIM, table), _q(RAW_COMPLETE, table)
            done = 0
            started = time.perf_counter()
            while True:
                now = _micros()
                cur = await conn.execute(claim, (os.urandom(12).hex(), now, now, batch))
                ids = [row[0] for row in await cur.fetchall()]
                if not ids:
                    break
                await conn.execute(complete, (_micros(), ids))
                done += len(ids)
            elapsed = time.perf_counter() - started
    if done != runs:
        raise SystemExit(f"raw loop completed {done} of {runs} jobs")
    return elapsed


async def raw_latency(dsn: str, runs: int, rate: float) -> Latency:
    """Insert+NOTIFY → claimed seconds: one LISTENing connection claims on each notification."""
    with _raw_table(dsn) as table:
        producer = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
        listener = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
        claimer = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
        await listener.execute("LISTEN raw_bench")
        claimed: list[float] = []
        claim = _q(RAW_CLAIM, table)

        async def consume() -> None:
            async for _ in listener.notifies():
                now = _micros()
                cur = await claimer.execute(claim, (os.urandom(12).hex(), now, now, 10))
                rows = await cur.fetchall()
                claimed.extend(time.perf_counter() for _ in rows)
                if len(claimed) >= runs:
                    return

        consuming = asyncio.create_task(consume())
        sent: list[float] = []
        took: list[float] = []
        loop = asyncio.get_running_loop()
        begin = loop.time()
        insert = _q(RAW_INSERT_NOTIFY, table)
        for n in range(runs):
            await asyncio.sleep(max(0.0, begin + n / rate - loop.time()))
            sent.append(time.perf_counter())
            await producer.execute(insert, (json.dumps({"n": n}), _micros()))
            took.append(time.perf_counter() - sent[-1])
        await asyncio.wait_for(consuming, 10)
        for conn in (producer, listener, claimer):
            await conn.close()
    done = min(len(sent), len(claimed))
    return Latency(enqueue=took[:done], total=[claimed[i] - sent[i] for i in range(done)])


# -- claim cost as the table grows ----------------------------------------------------


async def claim_latency_at(dsn: str, schema: str, queued: int, samples: int = 200) -> float:
    """Median seconds of one ``claim_due_runs`` (limit 10) with ``queued`` runs waiting."""
    async with _runtime(dsn, schema) as rl:
        await rl.trigger_many(noop, _payloads(min(queued, 1_000)))
        if queued > 1_000:
            # Copy the first thousand rows (and their events) until the table holds ``queued``.
            with psycopg.connect(dsn, autocommit=True) as conn:
                runs = sql.SQL("{}.runlane_runs").format(sql.Identifier(schema))
                conn.execute(
                    sql.SQL(
                        "INSERT INTO {runs} SELECT r.environment, r.id || '-' || g, r.task_id, "
                        "r.queue, r.status, r.payload, r.attempt, r.failure_count, r.run_at, "
                        "r.created_at, r.updated_at, r.event_sequence, r.source, r.result, "
                        "r.failure, r.idempotency_key, r.singleton_key, r.concurrency_key, "
                        "r.trace_carrier, r.lease_owner, r.lease_token, r.lease_expires_at, "
                        "r.cancel_reason, r.delivery_requested_at, r.reserved_until "
                        "FROM {runs} r, generate_series(1, %s) g"
                    ).format(runs=runs),
                    (queued // 1_000 - 1,),
                )
                conn.execute(sql.SQL("VACUUM ANALYZE {}").format(runs))
        storage = rl.storage
        timings = []
        for _ in range(samples):
            now = rl.clock.now()
            lease = LeaseRequest("bench", now + timedelta(seconds=30))
            started = time.perf_counter()
            claimed = await storage.claim_due_runs("bench", [rl.registry.queue_policies[0]], 10,
                                                   lease, now)  # fmt: skip
            timings.append(time.perf_counter() - started)
            assert len(claimed) == 10
        return statistics.median(timings)


# -- report --------------------------------------------------------------------------


def _schema() -> str:
    return f"bench_{uuid.uuid4().hex[:8]}"


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def _row(
    operation: str, runlane: float, raw_single: float, raw_batched: float | None, ratio: float
) -> dict[str, Any]:
    return {
        "operation": operation,
        "runlane": runlane,
        "raw_single": raw_single,
        "raw_batched": raw_batched,
        "ratio": ratio,
    }


#: Measurement groups ``--only`` may pick (default: all of them).
GROUPS = ("bulk", "single", "drain", "latency")


async def _median_rate(runs: int, *measurements: Callable[[], Awaitable[float]],
                       repeat: int) -> list[float]:  # fmt: skip
    """Runs per second of each measurement: the median over ``repeat`` rounds, the
    measurements taking turns within a round so a slow spell of the machine hits all."""
    seconds: list[list[float]] = [[] for _ in measurements]
    for _ in range(repeat):
        for times, measurement in zip(seconds, measurements, strict=True):
            times.append(await measurement())
    return [runs / statistics.median(times) for times in seconds]


async def measure(
    dsn: str,
    concurrency: int,
    claim_scaling: bool,
    only: frozenset[str] = frozenset(GROUPS),
    repeat: int = DEFAULT_REPEAT,
) -> dict[str, Any]:
    """Every measurement (or the groups in ``only``), in rows of (Runlane, raw single,
    raw batched); rates are medians of ``repeat`` interleaved rounds."""
    rows: list[dict[str, Any]] = []
    if "bulk" in only or "single" in only:
        single, raw_single = await _median_rate(
            SINGLE_RUNS,
            lambda: runlane_single_trigger(dsn, _schema(), SINGLE_RUNS),
            lambda: raw_insert(dsn, SINGLE_RUNS, 1),
            repeat=repeat,
        )
    if "bulk" in only:
        bulk, raw_bulk = await _median_rate(
            BULK_RUNS,
            lambda: runlane_bulk_trigger(dsn, _schema(), BULK_RUNS),
            lambda: raw_insert(dsn, BULK_RUNS, RAW_INSERT_BATCH),
            repeat=repeat,
        )
        rows.append(_row(f"bulk trigger ({BULK_RUNS:,} runs, runs/s)", bulk, raw_single,
                         raw_bulk, bulk / raw_bulk))  # fmt: skip
    if "single" in only:
        many, raw_many = await _median_rate(
            SINGLE_RUNS,
            lambda: runlane_single_trigger(dsn, _schema(), SINGLE_RUNS, PRODUCERS),
            lambda: raw_insert(dsn, SINGLE_RUNS, 1, PRODUCERS),
            repeat=repeat,
        )
        rows.append(_row(f"single trigger ({SINGLE_RUNS:,} runs, runs/s)", single, raw_single,
                         None, single / raw_single))  # fmt: skip
        rows.append(_row(f"single trigger, {PRODUCERS} producers (runs/s)", many, raw_many,
                         None, many / raw_many))  # fmt: skip
    if "drain" in only:
        drain, raw_drain_many = await _median_rate(
            DRAIN_RUNS,
            lambda: runlane_drain(dsn, _schema(), DRAIN_RUNS, concurrency),
            lambda: raw_drain(dsn, DRAIN_RUNS, RAW_CLAIM_BATCH),
            repeat=repeat,
        )
        raw_drain_one = RAW_SINGLE_DRAIN_RUNS / await raw_drain(dsn, RAW_SINGLE_DRAIN_RUNS, 1)
        rows.append(_row(f"drain ({DRAIN_RUNS:,} runs, worker x{concurrency}, runs/s)", drain,
                         raw_drain_one, raw_drain_many, drain / raw_drain_many))  # fmt: skip
    if "latency" in only:
        # Every round's samples pooled: percentiles of repeat x LATENCY_RUNS triggers each.
        latencies, raw_latencies = Latency(), Latency()
        for _ in range(repeat):
            latencies.extend(await runlane_latency(dsn, _schema(), LATENCY_RUNS, LATENCY_RATE))
            raw_latencies.extend(await raw_latency(dsn, LATENCY_RUNS, LATENCY_RATE))
        pace = f"ms, {LATENCY_RUNS} at {LATENCY_RATE:g}/s"
        # The total, then its two halves: each side ends in one durable commit (the
        # trigger's; the claim's), so the raw loop is the floor of each half.
        for label, ours_samples, raw_samples, fraction in (
            ("enqueue→start latency p50", latencies.total, raw_latencies.total, 0.5),
            ("enqueue→start latency p99", latencies.total, raw_latencies.total, 0.99),
            ("  latency: enqueue call p50", latencies.enqueue, raw_latencies.enqueue, 0.5),
            (
                "  latency: call returned→start p50",
                latencies.after_enqueue(),
                raw_latencies.after_enqueue(),
                0.5,
            ),
        ):
            ours = _percentile(ours_samples, fraction) * 1000
            raw = _percentile(raw_samples, fraction) * 1000
            rows.append(_row(f"{label} ({pace})", ours, raw, None, ours / raw))
    result: dict[str, Any] = {"repeat": repeat, "results": rows}
    if claim_scaling:
        result["claim_latency_ms"] = {
            f"{queued:,} queued": await claim_latency_at(dsn, _schema(), queued) * 1000
            for queued in (10_000, 1_000_000)
        }
    return result


def _print(result: dict[str, Any]) -> None:
    print(
        "Runlane on PostgreSQL beside raw psycopg (same server, fsync on; "
        f"medians of {result['repeat']} interleaved rounds)"
    )
    print(f"{'operation':<52}{'runlane':>10}{'raw single':>12}{'raw batched':>13}{'ratio':>8}")
    for row in result["results"]:
        batched = f"{row['raw_batched']:,.0f}" if row["raw_batched"] is not None else "-"
        digits = 2 if "latency" in row["operation"] else 0
        print(
            f"{row['operation']:<52}{row['runlane']:>10,.{digits}f}"
            f"{row['raw_single']:>12,.{digits}f}{batched:>13}{row['ratio']:>8.2f}"
        )
    print("ratio: runlane / raw batched (bulk, drain) or raw single (single trigger, latency)")
    for label, ms in result.get("claim_latency_ms", {}).items():
        print(f"claim_due_runs(limit=10) median with {label}: {ms:.2f} ms")


def main() -> None:
    """Parse options, start a server unless one is given, measure, print."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", type=int, default=DEFAULT_CONCURRENCY)
    parser.add_argument("--claim-scaling", action="store_true", help="Also time claims at 1M.")
    parser.add_argument("--json", action="store_true", help="Print JSON.")
    parser.add_argument(
        "--repeat",
        type=int,
        default=DEFAULT_REPEAT,
        help=f"Rounds per measurement; rates are medians (default {DEFAULT_REPEAT}).",
    )
    parser.add_argument(
        "--only",
        default=",".join(GROUPS),
        help=f"Comma-separated measurement groups to run (default: all of {', '.join(GROUPS)}).",
    )
    args = parser.parse_args()
    only = frozenset(name.strip() for name in args.only.split(",") if name.strip())
    if not only or not only <= set(GROUPS):
        parser.error(f"--only takes a comma-separated subset of {', '.join(GROUPS)}")
    with bench_database("runlane_bench") as dsn:
        result = asyncio.run(
            measure(dsn, args.concurrency, args.claim_scaling, only, max(1, args.repeat))
        )
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        _print(result)


if __name__ == "__main__":
    main()
