"""Instructions per run, counted by callgrind: the steady measure of the runtime's own cost.

Wall-clock figures on a shared 2-core machine swing by a third between spells;
instruction counts do not. This runs each workload under ``valgrind --tool=callgrind
--instr-atstart=no`` in a child process and counts only the timed part (the
drain, or the trigger calls), so two trees can be compared exactly::

    .venv/bin/python bench/bench_instructions.py                      # SQLite only
    .venv/bin/python bench/bench_instructions.py --postgres           # + PG workloads
    .venv/bin/python bench/bench_instructions.py --src /other/tree/src --postgres
    .venv/bin/python bench/bench_instructions.py --workloads pg-steps,pg-steps-progress

``--workloads`` counts the workloads named (any of the list below) instead, and
``--repeat 5`` each of them five times in turns, reporting the medians.

``--src`` puts another checkout's ``src`` first on the child's path (the tree
before a change, say). ``--postgres`` also counts, on a throwaway server (or
``RUNLANE_BENCH_DATABASE_URL``), the client side of a PostgreSQL drain (one worker,
100 slots), of ``trigger_many`` and of lone triggers: the server's work is in
another process and is not counted. Needs ``valgrind`` on the PATH.

Workloads (run count each): ``sqlite-drain`` 2,000 prefilled runs, one DRAIN
worker with 10 slots (the peers harness's setting); ``sqlite-single`` and
``pg-single`` 2,000 ``trigger`` calls in a loop; ``pg-drain`` 3,000 runs, 100
slots; ``sqlite-bulk`` and ``pg-bulk`` one ``trigger_many`` of 5,000; ``pg-claim``
1,000 claims of one run each (an idle worker's claim, nothing settled with it).
``sqlite-progress`` and ``pg-progress`` are the two drains again with a task that
calls ``ctx.progress`` ten times (with a message), as ``bench_observing.py
progress`` does: set against the plain drain, the client's cost of ten reports per
run.

``sqlite-otel-off``, ``sqlite-otel-api`` and ``sqlite-otel10`` are the SQLite
drain of runs triggered one by one (one producer span, so one sampling decision,
each, as one per request; such a drain costs a few thousand instructions a run more
than one of ``trigger_many``'s runs, so they are set against each other): without
observers, with the OpenTelemetry observer and the API alone (no SDK), and with
the setup the observability guide recommends, an SDK ``TracerProvider`` at
``ParentBased(TraceIdRatioBased(0.1))`` exporting through a ``BatchSpanProcessor``
to an exporter that discards the spans (the processor's queue and thread count; no
network). Python's random numbers are seeded so that the SDK's trace ids sample
exactly 200 of the 2,000 runs (checked). ``--otel-ratio 0`` and ``--otel-ratio 1``
sample none and all of them: set against ``sqlite-otel-off``, the cost of an
unsampled and of a sampled attempt.

``bench_features.py`` also counts, through this script's child, drains that this
script's own list leaves out: ``sqlite-steps`` and ``pg-steps`` (tasks of ten 1 ms
sleeps, the kind of task that reports progress; with ``-progress``, a report after
each step) and ``sqlite-priorities`` and ``pg-priorities`` (the plain drain's runs
at priorities 0, 5 and 10 on a queue with a priority window).

Progress under callgrind: the run is some 50 times slower in wall time, so an attempt
lives that much longer than it does natively, and one that outlived
``PROGRESS_INTERVAL`` (a second) would have its values written by the progress writer,
storage calls a native drain never makes. The child counts the ``write_progress``
calls of every counted drain and the parent reports them beside the count
(``progress_writes``): with ten slots, a steps attempt lives a few tenths of a second
under callgrind, and its drains make no such write, as natively (every attempt's last
value rides on its settle). Only the writer's sweep timer fires more often (about a
hundred times per 2,000 runs, natively ten): some hundred instructions per run.

The steps drains sleep, so how their claims and settles group depends on timing: their
counts move by a few percent from one run to the next (more on a loaded machine).
Compare the medians of several runs there (``--repeat``), not single counts.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

WORKLOADS = {
    "sqlite-drain": 2_000,
    "sqlite-progress": 2_000,
    "sqlite-single": 2_000,
    "sqlite-bulk": 5_000,
    "pg-drain": 3_000,
    "pg-progress": 3_000,
    "pg-bulk": 5_000,
    "pg-single": 2_000,
    "pg-claim": 1_000,
    "sqlite-steps": 2_000,
    "sqlite-steps-progress": 2_000,
    "pg-steps": 3_000,
    "pg-steps-progress": 3_000,
    "sqlite-priorities": 2_000,
    "pg-priorities": 3_000,
    "sqlite-otel-off": 2_000,
    "sqlite-otel-api": 2_000,
    "sqlite-otel10": 2_000,
}
#: The recommended head-sampling ratio, and the seed of Python's random numbers with
#: which the SDK's trace ids sample exactly that share of ``sqlite-otel10``'s runs.
OTEL_RATIO = 0.1
OTEL_SEED = 1
_COLLECTED = re.compile(r"Collected\s*:\s*(\d+)")
_WRITES = re.compile(r"progress writes: (\d+) calls, (\d+) values")
#: ``write_progress`` calls and values written in the counted part, by workload (its
#: last count): the reports a drain stored on their own rather than with the settle.
PROGRESS_WRITES: dict[str, tuple[int, int]] = {}


# -- the child: one workload, instrumented around its timed part -----------------------


def _tracing(workload: str, ratio: float) -> tuple[list[Any], Any]:
    """The OpenTelemetry observer of an ``-otel`` workload (none for the others), and
    its SDK tracer provider (``None`` without one), sampling at ``ratio``."""
    if "-otel" not in workload or workload.endswith("otel-off"):
        return [], None
    from runlane.otel import otel_tracing

    if workload.endswith("otel-api"):
        return [otel_tracing()], None  # no SDK: the API's global no-op provider
    from collections.abc import Sequence

    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )
    from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

    class Discard(SpanExporter):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider(sampler=ParentBased(TraceIdRatioBased(ratio)))
    provider.add_span_processor(BatchSpanProcessor(Discard()))
    return [otel_tracing(tracer_provider=provider)], provider


def _callgrind(state: str) -> None:
    command = ["callgrind_control", "-i", state, str(os.getpid())]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


async def _child(workload: str, runs: int, target: str, ratio: float = OTEL_RATIO) -> None:
    from runlane import Context, Runlane, WorkerMode, postgres_lane, queue, sqlite_lane, task
    from runlane.ports.storage import LeaseRequest

    # The priorities drains: a queue with a priority window, runs at 0, 5 and 10.
    windowed = {"priority_window": "5m"} if workload.endswith("priorities") else {}
    main = queue("main", default=True, **windowed)

    @task("bench.noop", queue=main)
    async def noop(payload: Any, ctx: Context) -> None:
        """Does nothing: the count is the runtime's."""

    @task("bench.reporting", queue=main)
    async def reporting(payload: Any, ctx: Context) -> None:
        """Reports progress ten times and does nothing else."""
        for step in range(1, 11):
            await ctx.progress(step / 10, message=f"step {step} of 10")

    @task("bench.steps", queue=main)
    async def steps(payload: Any, ctx: Context) -> None:
        """Ten 1 ms steps, reporting progress after each when the payload says so."""
        for step in range(1, 11):
            await asyncio.sleep(0.001)
            if payload["report"]:
                await ctx.progress(step / 10, message=f"step {step} of 10")

    lane = sqlite_lane(target) if workload.startswith("sqlite") else postgres_lane(target)
    observers, provider = _tracing(workload, ratio)
    rl = Runlane(lane=lane, queues=[main], tasks=[noop, reporting, steps], observers=observers)
    await rl.migrate()
    payloads = [{"n": n} for n in range(runs)]
    async with rl:
        await rl.runs.list(limit=1)  # connections open before counting
        writes = _count_progress_writes(rl.storage)
        if workload.endswith("priorities"):
            for first in range(0, runs, 500):  # batches of 500 in turns of 0, 5 and 10
                chunk = payloads[first : first + 500]
                await rl.trigger_many(noop, chunk, priority=(first // 500) % 3 * 5)
            slots = 10 if workload.startswith("sqlite") else 100
            worker = rl.worker(concurrency=slots, mode=WorkerMode.DRAIN, handle_signals=False)
            _callgrind("on")
            await worker.run()
            _callgrind("off")
            if worker.executed != runs:
                raise SystemExit(f"executed {worker.executed} of {runs} runs")
        elif "-steps" in workload:
            report = workload.endswith("progress")
            await rl.trigger_many(steps, [{"report": report}] * runs)
            slots = 10 if workload.startswith("sqlite") else 100
            worker = rl.worker(concurrency=slots, mode=WorkerMode.DRAIN, handle_signals=False)
            _callgrind("on")
            await worker.run()
            _callgrind("off")
            if worker.executed != runs:
                raise SystemExit(f"executed {worker.executed} of {runs} runs")
        elif "-otel" in workload:
            random.seed(OTEL_SEED)
            made = [await rl.trigger(noop, payload) for payload in payloads]
            if provider is not None:
                headers = [(run.trace_carrier or {}).get("traceparent", "") for run in made]
                sampled = sum(int(header[-2:] or "0", 16) & 1 for header in headers)
                if sampled != round(runs * ratio):
                    raise SystemExit(f"sampled {sampled} of {runs} runs, not {ratio:.0%}")
                provider.force_flush()  # the producer spans are exported before counting
            worker = rl.worker(concurrency=10, mode=WorkerMode.DRAIN, handle_signals=False)
            _callgrind("on")
            await worker.run()
            _callgrind("off")
            if provider is not None:
                provider.shutdown()
            if worker.executed != runs:
                raise SystemExit(f"executed {worker.executed} of {runs} runs")
        elif workload.endswith(("drain", "progress")):
            await rl.trigger_many(reporting if workload.endswith("progress") else noop, payloads)
            slots = 10 if workload.startswith("sqlite") else 100
            worker = rl.worker(concurrency=slots, mode=WorkerMode.DRAIN, handle_signals=False)
            _callgrind("on")
            await worker.run()
            _callgrind("off")
            if worker.executed != runs:
                raise SystemExit(f"executed {worker.executed} of {runs} runs")
        elif workload == "pg-claim":
            # An idle worker's claim: one run each time, nothing to settle with it.
            await rl.trigger_many(noop, payloads)
            policies = [rl.registry.queue_policies[0]]
            _callgrind("on")
            for _ in payloads:
                now = rl.clock.now()
                lease = LeaseRequest("bench", now + timedelta(seconds=30))
                claimed = await rl.storage.claim_due_runs(rl.environment, policies, 1, lease, now)
                if len(claimed) != 1:
                    raise SystemExit(f"claimed {len(claimed)} runs, not 1")
            _callgrind("off")
        elif workload.endswith("bulk"):
            _callgrind("on")
            await rl.trigger_many(noop, payloads)
            _callgrind("off")
        else:
            _callgrind("on")
            for payload in payloads:
                await rl.trigger(noop, payload)
            _callgrind("off")
    print(f"progress writes: {writes[0]} calls, {writes[1]} values", file=sys.stderr)


def _count_progress_writes(storage: Any) -> list[int]:
    """Count ``storage``'s ``write_progress`` calls and values from now on (a wrapper
    that costs nothing until called): [calls, values]."""
    counted = [0, 0]
    write = storage.write_progress

    async def counting(environment: str, writes: Any, now: Any) -> Any:
        counted[0] += 1
        counted[1] += len(writes)
        return await write(environment, writes, now)

    storage.write_progress = counting
    return counted


# -- the parent: one child per workload ------------------------------------------------


def _count(
    workload: str, target: str, src: str | None, folder: Path, ratio: float = OTEL_RATIO
) -> int:
    env = dict(os.environ)
    if src:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [src, env.get("PYTHONPATH")]))
    command = [
        "valgrind",
        "--tool=callgrind",
        "--instr-atstart=no",
        f"--callgrind-out-file={folder / (workload + '.out')}",
        sys.executable,
        __file__,
        "--child",
        workload,
        "--target",
        target,
        "--otel-ratio",
        str(ratio),
    ]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    found = _COLLECTED.search(done.stderr)
    if done.returncode != 0 or found is None:
        raise SystemExit(f"{workload} failed:\n{done.stderr[-2000:]}")
    writes = _WRITES.search(done.stderr)
    if writes is not None:
        PROGRESS_WRITES[workload] = (int(writes.group(1)), int(writes.group(2)))
    return int(found.group(1))


@contextlib.contextmanager
def _postgres_target() -> Iterator[str]:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for tests.support
    from tests.support.postgres_server import bench_database

    with bench_database("runlane_bench") as dsn:
        yield dsn


def _reset_postgres(dsn: str) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DROP SCHEMA IF EXISTS runlane CASCADE")


#: The workloads counted by default (``--postgres`` adds the PG ones).
DEFAULT_SQLITE = (
    "sqlite-drain",
    "sqlite-progress",
    "sqlite-single",
    "sqlite-bulk",
    "sqlite-otel-off",
    "sqlite-otel-api",
    "sqlite-otel10",
)
DEFAULT_PG = ("pg-drain", "pg-progress", "pg-bulk", "pg-single", "pg-claim")
#: Ten progress reports per run, set against the same drain without them.
PROGRESS_PAIRS = {
    "sqlite": ("sqlite-progress", "sqlite-drain"),
    "pg": ("pg-progress", "pg-drain"),
    "sqlite-steps": ("sqlite-steps-progress", "sqlite-steps"),
    "pg-steps": ("pg-steps-progress", "pg-steps"),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--postgres", action="store_true", help="count the PG workloads too")
    parser.add_argument("--workloads", help="comma-separated workloads instead of the default")
    parser.add_argument(
        "--repeat", type=int, default=1, help="count each workload this often (the median)"
    )
    parser.add_argument("--src", help="a checkout's src folder to import runlane from")
    parser.add_argument(
        "--otel-ratio",
        type=float,
        choices=(0.0, OTEL_RATIO, 1.0),
        default=OTEL_RATIO,
        help="sqlite-otel10's sampling ratio: 0 and 1 count an unsampled and a sampled "
        "attempt (the seed samples exactly a tenth of the runs at the default)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--target", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        asyncio.run(_child(args.child, WORKLOADS[args.child], args.target, args.otel_ratio))
        return
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not on the PATH")
    if args.workloads:
        chosen = [workload for workload in args.workloads.split(",") if workload]
        unknown = sorted(set(chosen) - set(WORKLOADS))
        if unknown:
            raise SystemExit(f"unknown workloads: {', '.join(unknown)}")
    else:
        chosen = [*DEFAULT_SQLITE, *(DEFAULT_PG if args.postgres else ())]
    samples: dict[str, list[float]] = {workload: [] for workload in chosen}
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        folder = Path(tmp)
        uses_pg = any(workload.startswith("pg") for workload in chosen)
        dsn = stack.enter_context(_postgres_target()) if uses_pg else ""
        # In turns, so that the machine's swings fall on every workload alike.
        for turn in range(args.repeat):
            for workload in chosen:
                if workload.startswith("pg"):
                    _reset_postgres(dsn)
                    target = dsn
                else:
                    target = str(folder / f"{workload}-{turn}.sqlite")
                total = _count(workload, target, args.src, folder, args.otel_ratio)
                samples[workload].append(total / WORKLOADS[workload])
    counts = {workload: statistics.median(values) for workload, values in samples.items()}
    reports = {
        name: counts[reporting] / counts[plain] - 1
        for name, (reporting, plain) in PROGRESS_PAIRS.items()
        if reporting in counts and plain in counts
    }
    writes = {
        workload: {"calls": calls, "values": values}
        for workload, (calls, values) in PROGRESS_WRITES.items()
        if workload.endswith("progress")
    }
    # The OpenTelemetry observer, set against the same drain without it.
    tracing = {
        workload: counts[workload] / counts["sqlite-otel-off"] - 1
        for workload in ("sqlite-otel-api", "sqlite-otel10")
        if workload in counts and "sqlite-otel-off" in counts
    }
    if args.json:
        figures = {
            "instructions_per_run": counts,
            "progress_overhead": reports,
            "tracing_overhead": tracing,
        }
        if args.repeat > 1:
            figures["samples"] = samples
        print(json.dumps({**figures, "progress_writes": writes}, indent=2))
        return
    for workload, per_run in counts.items():
        spread = samples[workload]
        extra = f" (median of {len(spread)}: {min(spread):,.0f}-{max(spread):,.0f})"
        print(f"{workload:22} {per_run:>10,.0f} instructions per run" + extra * (len(spread) > 1))
    for name, overhead in reports.items():
        print(f"{name}: ten progress reports per run cost {overhead:+.1%} of a drain")
    for workload, written in writes.items():
        print(f"{workload}: {written['calls']} write_progress calls in the counted drain")
    for workload, overhead in tracing.items():
        print(f"{workload}: tracing costs {overhead:+.1%} of the same drain without it")


if __name__ == "__main__":
    main()
