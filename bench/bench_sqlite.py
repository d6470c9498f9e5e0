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

``--observers`` measures only the drain, in interleaved rounds of eight
configurations: no observers; OpenTelemetry alone, with the API and no SDK
(``otel-api``) and with the recommended SDK setup (``otel-sdk-sampled-skip``);
Prometheus; Prometheus and OpenTelemetry with the API alone (no SDK); and with
the SDK (batch processor, discarding exporter) at
``ParentBased(TraceIdRatioBased(--sample-ratio))``, with ``skip_unsampled=True``
(``-skip``) and with the observer's default (which skips the same spans by itself
for a parent-based sampler), and at full sampling. Each run is triggered on its
own, so each has its own sampling decision (``--seed`` repeats the draw). It prints each
configuration's median rate and the median over rounds of its time divided by
the time without observers in the same round, for wall time and for the CPU
time of the process (steadier on a shared machine).

``--config NAME`` drains once with one of those configurations; with
``--callgrind``, under ``valgrind --tool=callgrind --instr-atstart=no``, only the
drain's instructions are counted (the steadiest figure of all)::

    valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=off.out \
        .venv/bin/python bench/bench_sqlite.py --observers --config off --runs 1000 --callgrind
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sqlite3
import statistics
import subprocess
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


#: The --observers configurations, in the order they are printed.
OBSERVER_CONFIGS = (
    "off",
    "otel-api",
    "otel-sdk-sampled-skip",
    "prometheus",
    "prometheus+otel-api",
    "prometheus+otel-sdk-sampled",
    "prometheus+otel-sdk-sampled-skip",
    "prometheus+otel-sdk-full",
)
#: The sampling ratio the observability guide recommends (head sampling at the trigger).
RECOMMENDED_RATIO = 0.1


def _observers(config: str, ratio: float) -> tuple[list[Any], Callable[[], None]]:
    """The observers of ``config`` as an application would attach them, and a shutdown.

    The SDK configurations export through a ``BatchSpanProcessor`` to an exporter that
    discards (the processor's queue and thread are part of the cost; the network is
    not); the sampled one uses ``ParentBased(TraceIdRatioBased(ratio))``.
    """
    from collections.abc import Sequence as Spans

    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )
    from opentelemetry.sdk.trace.sampling import ALWAYS_ON, ParentBased, TraceIdRatioBased
    from prometheus_client import CollectorRegistry

    from runlane.metrics import prometheus_metrics
    from runlane.otel import otel_tracing

    class Discard(SpanExporter):
        def export(self, spans: Spans[ReadableSpan]) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    if config == "off":
        return [], lambda: None
    observers: list[Any] = (
        [] if config.startswith("otel") else [prometheus_metrics(CollectorRegistry())]
    )
    if config == "prometheus":
        return observers, lambda: None
    if config.endswith("otel-api"):
        # No SDK: the global provider is the API's no-op one (this script sets none).
        return [*observers, otel_tracing()], lambda: None
    sampler = ALWAYS_ON if config.endswith("full") else ParentBased(TraceIdRatioBased(ratio))
    provider = TracerProvider(sampler=sampler)
    provider.add_span_processor(BatchSpanProcessor(Discard()))
    # "-skip": skip_unsampled=True; otherwise the observer's default (left unset).
    skip = True if config.endswith("skip") else None
    tracing = otel_tracing(tracer_provider=provider, skip_unsampled=skip)
    return [*observers, tracing], provider.shutdown


def _callgrind(state: str) -> None:
    """Turn callgrind's instrumentation of this process ``on`` or ``off``."""
    command = ["callgrind_control", "-i", state, str(os.getpid())]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


async def traced_drain(
    path: Path,
    runs: int,
    concurrency: int,
    observers: Sequence[Any] = (),
    *,
    callgrind: bool = False,
) -> tuple[float, float]:
    """Wall and CPU seconds (every thread of the process, the span processor's too)
    for a DRAIN worker to execute ``runs`` runs, each triggered on its own (one
    producer span, so one sampling decision, per run, as one per request).

    With ``callgrind`` (the process runs under ``valgrind --tool=callgrind
    --instr-atstart=no``), instructions are counted around the drain only."""
    async with _runtime(path, observers) as rl:
        for payload in _payloads(runs):
            await rl.trigger(noop, payload)
        worker = rl.worker(mode=WorkerMode.DRAIN, concurrency=concurrency, handle_signals=False)
        if callgrind:
            _callgrind("on")
        started, cpu = time.perf_counter(), time.process_time()
        await worker.run()
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
        if callgrind:
            _callgrind("off")
        if worker.executed != runs:
            raise SystemExit(f"runlane executed {worker.executed} of {runs} runs")
        return elapsed, cpu


def observer_overhead(
    folder: Path, runs: int, concurrency: int, rounds: int, ratio: float
) -> dict[str, Any]:
    """Drain seconds of every configuration, interleaved round by round (each round
    starts with a different one), and each one's cost against ``off`` of its round."""
    counter = iter(range(1_000_000))
    seconds: dict[str, list[float]] = {config: [] for config in OBSERVER_CONFIGS}
    cpu: dict[str, list[float]] = {config: [] for config in OBSERVER_CONFIGS}
    for number in range(rounds):
        order = OBSERVER_CONFIGS[number % len(OBSERVER_CONFIGS) :]
        order += OBSERVER_CONFIGS[: number % len(OBSERVER_CONFIGS)]
        for config in order:
            observers, shutdown = _observers(config, ratio)
            path = folder / f"{next(counter)}.db"
            try:
                wall, used = asyncio.run(traced_drain(path, runs, concurrency, observers))
            finally:
                shutdown()
            seconds[config].append(wall)
            cpu[config].append(used)

    def ratios(figures: dict[str, list[float]], config: str) -> list[float]:
        return [on / off for on, off in zip(figures[config], figures["off"], strict=True)]

    results = []
    for config in OBSERVER_CONFIGS:
        wall_ratios, cpu_ratios = ratios(seconds, config), ratios(cpu, config)
        results.append(
            {
                "config": config,
                "runs_per_second": round(runs / statistics.median(seconds[config])),
                "cpu_us_per_run": round(statistics.median(cpu[config]) / runs * 1e6, 1),
                # Medians of the per-round ratios: a slow spell of the machine hits
                # both sides of a round, not one configuration.
                "wall_ratio": round(statistics.median(wall_ratios), 3),
                "cpu_ratio": round(statistics.median(cpu_ratios), 3),
                "wall_ratios": [round(value, 3) for value in wall_ratios],
            }
        )
    return {
        "runs": runs,
        "concurrency": concurrency,
        "rounds": rounds,
        "sample_ratio": ratio,
        "results": results,
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
    parser.add_argument("--rounds", type=int, default=5, help="Rounds of --observers.")
    parser.add_argument(
        "--sample-ratio",
        type=float,
        default=RECOMMENDED_RATIO,
        help="TraceIdRatioBased ratio of the sampled OTel SDK configuration.",
    )
    parser.add_argument(
        "--config",
        choices=OBSERVER_CONFIGS,
        help="With --observers: one drain of this configuration only.",
    )
    parser.add_argument(
        "--callgrind",
        action="store_true",
        help="With --config, under valgrind --tool=callgrind --instr-atstart=no: "
        "count instructions around the drain only.",
    )
    parser.add_argument(
        "--seed",
        type=int,
        help="Seed Python's random numbers (the SDK's trace ids, so which runs a ratio "
        "samples) for a drain that samples the same runs every time.",
    )
    args = parser.parse_args()
    if args.seed is not None:
        random.seed(args.seed)
    if args.observers and args.config:
        observers, shutdown = _observers(args.config, args.sample_ratio)
        with tempfile.TemporaryDirectory(prefix="runlane-bench-", dir=args.dir) as folder:
            try:
                wall, used = asyncio.run(
                    traced_drain(
                        Path(folder) / "drain.db",
                        args.runs,
                        args.concurrency,
                        observers,
                        callgrind=args.callgrind,
                    )
                )
            finally:
                shutdown()
        print(f"{args.config}: {args.runs:,} runs, wall {wall:.3f}s, CPU {used:.3f}s")
        return
    if args.observers:
        with tempfile.TemporaryDirectory(prefix="runlane-bench-", dir=args.dir) as folder:
            result = observer_overhead(
                Path(folder), args.runs, args.concurrency, args.rounds, args.sample_ratio
            )
        if args.json:
            print(json.dumps(result, indent=2))
            return
        print(
            f"drain of {result['runs']:,} no-op runs (concurrency {result['concurrency']}), "
            f"{result['rounds']} interleaved rounds; sampled = "
            f"ParentBased(TraceIdRatioBased({result['sample_ratio']}))"
        )
        print(
            f"{'observers':<30}{'runs/s':>8}{'wall/off':>10}{'CPU us/run':>12}{'CPU/off':>9}"
            "   wall/off per round"
        )
        for row in result["results"]:
            rounds = " ".join(f"{value:.3f}" for value in row["wall_ratios"])
            print(
                f"{row['config']:<30}{row['runs_per_second']:>8,}{row['wall_ratio']:>10.3f}"
                f"{row['cpu_us_per_run']:>12.1f}{row['cpu_ratio']:>9.3f}   {rounds}"
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


if __name__ == "__main__":
    main()
