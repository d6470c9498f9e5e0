"""Runlane on SQLite beside raw sqlite3: bulk trigger, single trigger and processing.

Each figure is runs per second; the ratio runlane/raw says how much of what
the bare database can do Runlane keeps while adding validation, event history,
leases and retries. Raw sqlite3 does the same work on the same kind of file (WAL,
synchronous=NORMAL, one IMMEDIATE transaction per write): a plain table of runs,
inserted one by one, inserted with executemany, and claimed and completed by
UPDATE statements. Every measurement gets a fresh file.

    .venv/bin/python bench/bench_sqlite.py            # 10,000 runs, concurrency 32
    .venv/bin/python bench/bench_sqlite.py --runs 2000 --json
    .venv/bin/python bench/bench_sqlite.py --observers --runs 5000   # observer overhead

``--observers`` measures only the drain, alternately without observers and with
the Prometheus and OpenTelemetry (SDK, batch processor, discarding exporter)
observers attached, and prints the median of each and their ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sqlite3
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from runlane import Context, Runlane, WorkerMode, queue, sqlite_lane, task

DEFAULT_RUNS = 10_000
DEFAULT_CONCURRENCY = 32
#: The raw claim loop takes this many runs per UPDATE, like a worker with free slots.
RAW_CLAIM_BATCH = 32

bench_queue = queue("bench", default=True)


@task("bench.noop")
async def noop(payload: Any, ctx: Context) -> None:
    """Does nothing: the benchmark measures the runtime, not the task."""


def _runtime(path: Path, observers: Sequence[Any] = ()) -> Runlane:
    return Runlane(lane=sqlite_lane(path), queues=[bench_queue], tasks=[noop], observers=observers)


def _payloads(runs: int) -> list[dict[str, int]]:
    return [{"n": n} for n in range(runs)]


# -- Runlane -------------------------------------------------------------------------


async def runlane_bulk_trigger(path: Path, runs: int) -> float:
    """Seconds for ``trigger_many`` of ``runs`` payloads."""
    async with _runtime(path) as rl:
        started = time.perf_counter()
        await rl.trigger_many(noop, _payloads(runs))
        return time.perf_counter() - started


async def runlane_single_trigger(path: Path, runs: int) -> float:
    """Seconds for ``runs`` awaited ``trigger`` calls, one after another."""
    async with _runtime(path) as rl:
        started = time.perf_counter()
        for payload in _payloads(runs):
            await rl.trigger(noop, payload)
        return time.perf_counter() - started


async def runlane_processing(
    path: Path, runs: int, concurrency: int, observers: Sequence[Any] = ()
) -> float:
    """Seconds for a DRAIN worker to execute ``runs`` queued no-op runs."""
    async with _runtime(path, observers) as rl:
        await rl.trigger_many(noop, _payloads(runs))
        worker = rl.worker(mode=WorkerMode.DRAIN, concurrency=concurrency, handle_signals=False)
        started = time.perf_counter()
        await worker.run()
        elapsed = time.perf_counter() - started
        if worker.executed != runs:
            raise SystemExit(f"runlane executed {worker.executed} of {runs} runs")
        return elapsed


# -- raw sqlite3 ---------------------------------------------------------------------

RAW_SCHEMA = """
CREATE TABLE runs (
    id TEXT PRIMARY KEY, task_id TEXT NOT NULL, queue TEXT NOT NULL, status TEXT NOT NULL,
    payload TEXT NOT NULL, attempt INTEGER NOT NULL DEFAULT 0, run_at INTEGER NOT NULL,
    lease_token TEXT, lease_expires_at INTEGER, result TEXT, updated_at INTEGER NOT NULL
);
CREATE INDEX runs_claimable ON runs (queue, run_at) WHERE status = 'queued';
"""
RAW_INSERT = (
    "INSERT INTO runs (id, task_id, queue, status, payload, run_at, updated_at) "
    "VALUES (?, 'bench.noop', 'bench', 'queued', ?, ?, ?)"
)
RAW_CLAIM = """
UPDATE runs SET status = 'running', attempt = attempt + 1, lease_token = ?,
    lease_expires_at = ?, updated_at = ?
WHERE id IN (
    SELECT id FROM runs WHERE queue = 'bench' AND status = 'queued' AND run_at <= ?
    ORDER BY run_at, id LIMIT ?
)
RETURNING id, lease_token
"""
RAW_COMPLETE = (
    "UPDATE runs SET status = 'succeeded', result = 'null', lease_token = NULL, updated_at = ? "
    "WHERE id = ? AND lease_token = ? AND status = 'running'"
)


def _raw_connection(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA busy_timeout = 30000")
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.executescript(RAW_SCHEMA)
    return conn


def _raw_rows(runs: int) -> list[tuple[str, str, int, int]]:
    now = time.time_ns() // 1000
    return [(str(uuid.uuid4()), json.dumps(payload), now, now) for payload in _payloads(runs)]


def raw_bulk_insert(path: Path, runs: int) -> float:
    """Seconds for one transaction of ``executemany`` inserts."""
    conn = _raw_connection(path)
    started = time.perf_counter()
    conn.execute("BEGIN IMMEDIATE")
    conn.executemany(RAW_INSERT, _raw_rows(runs))
    conn.execute("COMMIT")
    elapsed = time.perf_counter() - started
    conn.close()
    return elapsed


def raw_single_insert(path: Path, runs: int) -> float:
    """Seconds for ``runs`` inserts, each in its own committed transaction."""
    conn = _raw_connection(path)
    started = time.perf_counter()
    for row in _raw_rows(runs):
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(RAW_INSERT, row)
        conn.execute("COMMIT")
    elapsed = time.perf_counter() - started
    conn.close()
    return elapsed


def raw_processing(path: Path, runs: int) -> float:
    """Seconds to claim runs in batches and complete each in its own transaction."""
    conn = _raw_connection(path)
    conn.execute("BEGIN IMMEDIATE")
    conn.executemany(RAW_INSERT, _raw_rows(runs))
    conn.execute("COMMIT")
    completed = 0
    started = time.perf_counter()
    while True:
        now = time.time_ns() // 1000
        conn.execute("BEGIN IMMEDIATE")
        claimed = conn.execute(
            RAW_CLAIM, (os.urandom(12).hex(), now + 30_000_000, now, now, RAW_CLAIM_BATCH)
        ).fetchall()
        conn.execute("COMMIT")
        if not claimed:
            break
        for run_id, token in claimed:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(RAW_COMPLETE, (time.time_ns() // 1000, run_id, token))
            conn.execute("COMMIT")
            completed += 1
    elapsed = time.perf_counter() - started
    conn.close()
    if completed != runs:
        raise SystemExit(f"raw loop completed {completed} of {runs} runs")
    return elapsed


# -- report --------------------------------------------------------------------------


def measure(folder: Path, runs: int, concurrency: int) -> list[dict[str, Any]]:
    """Run every pair and return one row per operation."""
    counter = iter(range(1_000_000))

    def fresh() -> Path:
        return folder / f"bench-{next(counter)}.db"

    pairs: list[tuple[str, Callable[[], float], Callable[[], float]]] = [
        (
            "bulk trigger (trigger_many vs executemany)",
            lambda: asyncio.run(runlane_bulk_trigger(fresh(), runs)),
            lambda: raw_bulk_insert(fresh(), runs),
        ),
        (
            "single trigger (await trigger vs insert+commit)",
            lambda: asyncio.run(runlane_single_trigger(fresh(), runs)),
            lambda: raw_single_insert(fresh(), runs),
        ),
        (
            f"processing (worker x{concurrency} vs claim/complete loop)",
            lambda: asyncio.run(runlane_processing(fresh(), runs, concurrency)),
            lambda: raw_processing(fresh(), runs),
        ),
    ]
    rows = []
    for name, runlane_side, raw_side in pairs:
        runlane_rate = runs / runlane_side()
        raw_rate = runs / raw_side()
        rows.append(
            {
                "operation": name,
                "runlane_runs_per_second": round(runlane_rate),
                "raw_runs_per_second": round(raw_rate),
                "ratio": round(runlane_rate / raw_rate, 3),
            }
        )
    return rows


def _observers() -> list[Any]:
    """The Prometheus and OpenTelemetry observers as an application would attach them."""
    from collections.abc import Sequence as Spans

    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )
    from prometheus_client import CollectorRegistry

    from runlane.metrics import prometheus_metrics
    from runlane.otel import otel_tracing

    class Discard(SpanExporter):
        def export(self, spans: Spans[ReadableSpan]) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Discard()))
    return [prometheus_metrics(CollectorRegistry()), otel_tracing(tracer_provider=provider)]


def observer_overhead(folder: Path, runs: int, concurrency: int, rounds: int) -> dict[str, Any]:
    """Median drain seconds without and with the observers, alternating, and the ratio."""
    counter = iter(range(1_000_000))
    off: list[float] = []
    on: list[float] = []
    for _ in range(rounds):
        off.append(
            asyncio.run(runlane_processing(folder / f"off-{next(counter)}.db", runs, concurrency))
        )
        on.append(
            asyncio.run(
                runlane_processing(
                    folder / f"on-{next(counter)}.db", runs, concurrency, _observers()
                )
            )
        )
    median_off, median_on = statistics.median(off), statistics.median(on)
    return {
        "runs": runs,
        "rounds": rounds,
        "off_runs_per_second": round(runs / median_off),
        "on_runs_per_second": round(runs / median_on),
        "cost": round(median_on / median_off - 1, 3),
    }


def main() -> None:
    """Parse options, measure, print."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=DEFAULT_RUNS)
    parser.add_argument("--concurrency", type=int, default=DEFAULT_CONCURRENCY)
    parser.add_argument("--dir", type=Path, help="Folder for the database files (default: temp).")
    parser.add_argument("--json", action="store_true", help="Print JSON.")
    parser.add_argument(
        "--observers",
        action="store_true",
        help="Only the drain, without and with the Prometheus and OTel observers.",
    )
    parser.add_argument("--rounds", type=int, default=3, help="Rounds of --observers.")
    args = parser.parse_args()
    if args.observers:
        with tempfile.TemporaryDirectory(prefix="runlane-bench-", dir=args.dir) as folder:
            result = observer_overhead(Path(folder), args.runs, args.concurrency, args.rounds)
        if args.json:
            print(json.dumps(result, indent=2))
            return
        print(
            f"drain of {runs_label(result)} no-op runs, median of {result['rounds']}: "
            f"{result['off_runs_per_second']:,} runs/s without observers, "
            f"{result['on_runs_per_second']:,} with Prometheus + OTel "
            f"(cost {result['cost']:+.1%})"
        )
        return
    with tempfile.TemporaryDirectory(prefix="runlane-bench-", dir=args.dir) as folder:
        rows = measure(Path(folder), args.runs, args.concurrency)
    if args.json:
        print(json.dumps({"runs": args.runs, "results": rows}, indent=2))
        return
    print(f"{args.runs:,} no-op runs on SQLite (WAL, synchronous=NORMAL); runs per second")
    print(f"{'operation':<56}{'runlane':>10}{'raw':>12}{'runlane/raw':>13}")
    for row in rows:
        print(
            f"{row['operation']:<56}{row['runlane_runs_per_second']:>10,}"
            f"{row['raw_runs_per_second']:>12,}{row['ratio']:>13.3f}"
        )


def runs_label(result: dict[str, Any]) -> str:
    return f"{result['runs']:,}"


if __name__ == "__main__":
    main()
