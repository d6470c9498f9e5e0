"""The new features at scale, in one spell: rate limits, priorities, dependencies,
waits and progress, each as a ratio or a figure against its goal, on both lanes.

One invocation measures, on one SQLite folder and one PostgreSQL server (a throwaway
one, or ``RUNLANE_BENCH_DATABASE_URL``):

1. **drains in turns** (wall clock): each drain is a child process that imports
   runlane from one tree, fills a fresh store (a SQLite file, or a fresh PostgreSQL
   schema) with ``--runs`` runs and times one ``WorkerMode.DRAIN`` worker (32
   slots) executing them. The kinds, every one of them once per turn, in an order
   that rotates between turns so that the machine's swings fall on all:

   - ``plain`` no-op runs, from this tree and from every ``--baseline-src`` tree
     (the code before the features landed): the cost of the features to a drain
     that uses none of them (an unlimited queue, no priorities, no dependencies);
   - ``priorities``: the same runs triggered at priorities 0, 5 and 10 in turn on
     a queue with a priority window, against ``plain`` of this tree (the API does
     not exist before, so the comparison is feature used against feature unused);
   - ``steps`` and ``progress``: tasks of ten 1 ms steps, without and with a
     ``ctx.progress`` report after each step (this tree only, for the same reason).

   The figure of each comparison is the ratio of the medians (runs per second).

2. **instructions** (``--instructions``, callgrind through ``bench_instructions.py``;
   the client side on PostgreSQL): the plain drains of this tree and of every
   baseline tree, and the drains with ten reports a run (the no-op worst case of
   progress). Deterministic where a 3 % goal is below the wall clock's noise.

3. **rate limits** (``bench_flow.measure_rate``): two polling workers drain a
   backlog of ``--rate-seconds`` of a queue limited to 20 starts a second, as a
   whole and per key (5 keys); the share of the limit reached (goal: at least 0.9).

4. **dependencies** (``bench_workflows.measure``): a group of ``--members`` no-op
   members with a callback; how long after the last member's success the callback
   started (goal: within seconds; judged against 5 s).

5. **waits** (``bench_observing.bench_wait``): from an outcome's commit to
   ``rl.runs.wait`` returning in another process, ``--wait-samples`` samples; the
   p50 (goal: at most 20 ms).

Then one table: feature, what is compared, the figure, the goal, met or not::

    .venv/bin/python bench/bench_features.py --baseline-src ../before/src
    .venv/bin/python bench/bench_features.py --lanes sqlite --turns 3 --no-instructions
    .venv/bin/python bench/bench_features.py --baseline-src ../before/src --json

A baseline tree is a checkout (``git worktree add`` or ``git archive``) of the
commit before the features; its ``src`` goes first on the drain child's path.
Without one the ``plain`` rows compare nothing and say so.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
THIS_SRC = ROOT / "src"
DRAIN_SLOTS = 32
#: Priorities the ``priorities`` drain triggers its runs at, a third each, in turns.
PRIORITIES = (0, 5, 10)
#: What ``bench_instructions`` counts of this tree only, beside its plain drain.
THIS_TREE_WORKLOADS = ("priorities", "progress", "steps", "steps-progress")
#: The widest spread of the turns' wall-clock ratios that still judges a goal of a few
#: percent; wider (a loaded machine), the instruction counts judge alone.
WALL_SPREAD = 0.10
#: The callback of a 10,000-member group is "within seconds" if it starts within this.
CALLBACK_GOAL_SECONDS = 5.0


# -- the drain child: imports runlane from whichever tree is first on its path ----------


async def _drain_child(kind: str, lane_kind: str, target: str, schema: str, runs: int) -> None:
    from runlane import Context, Runlane, WorkerMode, postgres_lane, queue, sqlite_lane, task

    options: dict[str, Any] = {"priority_window": "5m"} if kind == "priorities" else {}
    main = queue("main", default=True, **options)

    @task("bench.noop", queue=main)
    async def noop(payload: Any, ctx: Context) -> None:
        """Ten steps of ``payload`` seconds (none: a no-op)."""
        if payload:
            for _ in range(10):
                await asyncio.sleep(payload)

    @task("bench.reporting", queue=main)
    async def reporting(payload: Any, ctx: Context) -> None:
        """Ten steps of ``payload`` seconds, reporting progress after each."""
        for step in range(1, 11):
            await asyncio.sleep(payload)
            await ctx.progress(step / 10, message=f"step {step} of 10")

    lane = sqlite_lane(target) if lane_kind == "sqlite" else postgres_lane(target, schema=schema)
    rl = Runlane(lane=lane, queues=[main], tasks=[noop, reporting], environment="bench")
    await rl.migrate()
    step = 0.001 if kind in ("steps", "progress") else None
    async with rl:
        if kind == "priorities":
            # Interleaved batches, so that the claim order mixes the three priorities.
            batch = 500
            for first in range(0, runs, batch):
                priority = PRIORITIES[(first // batch) % len(PRIORITIES)]
                count = min(batch, runs - first)
                await rl.trigger_many(noop, [None] * count, priority=priority)
        else:
            await rl.trigger_many(reporting if kind == "progress" else noop, [step] * runs)
        worker = rl.worker(concurrency=DRAIN_SLOTS, mode=WorkerMode.DRAIN, handle_signals=False)
        started = time.perf_counter()
        await worker.run()
        elapsed = time.perf_counter() - started
        if worker.executed != runs:
            raise SystemExit(f"executed {worker.executed} of {runs} runs")
    print(json.dumps({"seconds": elapsed, "rate": runs / elapsed}))


# -- the parent ------------------------------------------------------------------------


def _drain(kind: str, lane_kind: str, src: Path, runs: int, folder: Path, dsn: str | None) -> float:
    """Runs per second of one drain, in a child importing runlane from ``src``."""
    schema = f"f_{uuid.uuid4().hex[:10]}"
    target = str(folder / f"{schema}.db") if lane_kind == "sqlite" else str(dsn)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(src), str(ROOT)])}
    command = [sys.executable, __file__, "--child", kind, "--lane-kind", lane_kind,
               "--target", target, "--schema", schema, "--runs", str(runs)]  # fmt: skip
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise SystemExit(
                f"{kind} drain on {lane_kind} from {src} failed:\n{done.stderr[-3000:]}"
            )
        return float(json.loads(done.stdout.strip().splitlines()[-1])["rate"])
    finally:
        if lane_kind == "sqlite":
            for path in folder.glob(f"{schema}.db*"):
                path.unlink()
        else:
            _drop_schema(str(dsn), schema)


def _drop_schema(dsn: str, schema: str) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def _note(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def drains_in_turns(
    lanes: list[str], baselines: list[Path], runs: int, turns: int, dsn: str | None
) -> dict[str, list[float]]:
    """Every drain of the comparison once per turn, the order rotated each turn."""
    jobs: list[tuple[str, str, str, Path]] = []  # (label, kind, lane, src)
    for lane_kind in lanes:
        jobs.append((f"{lane_kind} plain this", "plain", lane_kind, THIS_SRC))
        for number, src in enumerate(baselines):
            jobs.append((f"{lane_kind} plain base{number}", "plain", lane_kind, src))
        jobs.append((f"{lane_kind} priorities this", "priorities", lane_kind, THIS_SRC))
        jobs.append((f"{lane_kind} steps this", "steps", lane_kind, THIS_SRC))
        jobs.append((f"{lane_kind} progress this", "progress", lane_kind, THIS_SRC))
    rates: dict[str, list[float]] = {label: [] for label, *_ in jobs}
    with tempfile.TemporaryDirectory() as tmp:
        for turn in range(turns):
            shift = turn % len(jobs)
            for label, kind, lane_kind, src in jobs[shift:] + jobs[:shift]:
                rates[label].append(_drain(kind, lane_kind, src, runs, Path(tmp), dsn))
            _note(f"drains: turn {turn + 1} of {turns} done")
    return rates


def instructions(lanes: list[str], baselines: list[Path], dsn: str | None) -> dict[str, float]:
    """Client instructions per run of the plain drains (every tree) and the drains
    with ten reports a run (this tree), counted by ``bench_instructions``."""
    sys.path.insert(0, str(BENCH))
    import bench_instructions as counting

    counts: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        trees: list[tuple[str, str | None]] = [("this", None)]
        trees += [(f"base{n}", str(src)) for n, src in enumerate(baselines)]
        for lane_kind in lanes:
            prefix = "sqlite" if lane_kind == "sqlite" else "pg"
            for name, src in trees:
                workloads = [f"{prefix}-drain"]
                if src is None:
                    workloads += [f"{prefix}-{kind}" for kind in THIS_TREE_WORKLOADS]
                for workload in workloads:
                    if prefix == "pg":
                        counting._reset_postgres(str(dsn))
                        target = str(dsn)
                    else:
                        target = str(folder / f"{workload}-{name}.sqlite")
                    total = counting._count(workload, target, src, folder)
                    counts[f"{workload} {name}"] = total / counting.WORKLOADS[workload]
                    _note(
                        f"instructions: {workload} of {name}: {counts[f'{workload} {name}']:,.0f}"
                    )
    return counts


def counting_writes() -> dict[str, tuple[int, int]]:
    """``write_progress`` calls and values of the drains ``instructions`` counted."""
    sys.path.insert(0, str(BENCH))
    import bench_instructions as counting

    return counting.PROGRESS_WRITES


def rate_limits(lanes: list[str], seconds: float, dsn: str | None) -> list[dict[str, Any]]:
    sys.path.insert(0, str(BENCH))
    import bench_flow

    from runlane import postgres_lane, sqlite_lane

    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for lane_kind in lanes:
            for keys in (0, 5):
                if lane_kind == "sqlite":
                    path = Path(tmp) / f"rate-{keys}.db"
                    factory: Any = lambda path=path: sqlite_lane(path)  # noqa: E731
                else:
                    schema = f"rate_{keys}"
                    factory = lambda schema=schema: postgres_lane(str(dsn), schema=schema)  # noqa: E731
                result = asyncio.run(bench_flow.measure_rate(factory, 20, 1, seconds, 2, keys))
                results.append({"lane": lane_kind, "keys": keys, **result})
                _note(f"rate: {lane_kind}, {keys} keys: {result['share_of_rate_min']:.1%}")
    return results


def dependencies(lanes: list[str], members: int, dsn: str | None) -> list[dict[str, Any]]:
    sys.path.insert(0, str(BENCH))
    import bench_workflows

    from runlane import postgres_lane, sqlite_lane

    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for lane_kind in lanes:
            lane = (
                sqlite_lane(str(Path(tmp) / "groups.db"))
                if lane_kind == "sqlite"
                else postgres_lane(str(dsn), schema="groups")
            )
            figures = asyncio.run(bench_workflows.measure(lane, members, DRAIN_SLOTS))
            results.append({"lane": lane_kind, **figures})
            _note(f"group of {members}, {lane_kind}: {figures}")
    return results


def waits(lanes: list[str], samples: int) -> list[dict[str, Any]]:
    sys.path.insert(0, str(BENCH))
    import bench_observing

    results = []
    for lane_kind in lanes:
        with contextlib.redirect_stdout(io.StringIO()):
            figures = asyncio.run(bench_observing.bench_wait(lane_kind, samples))
        results.append({"lane": lane_kind, **figures})
        _note(f"wait, {lane_kind}: p50 {figures['p50_ms']:.2f} ms")
    return results


# -- the table -------------------------------------------------------------------------


def _ratio_row(
    feature: str, compared: str, ratio: float, goal: str, met: bool | None, extra: str = ""
) -> dict[str, Any]:
    figure = f"{ratio:.3f}x ({(ratio - 1) * 100:+.1f} %)" + (f"; {extra}" if extra else "")
    return {"feature": feature, "compared": compared, "figure": figure, "goal": goal, "met": met}


def _time_ratio(rates: dict[str, list[float]], slow: str, fast: str) -> tuple[float, str, bool]:
    """The median over turns of drain time ``slow`` / drain time ``fast`` (each turn's
    two drains ran close together), the spread of the turns' ratios, and whether that
    spread is narrow enough (within WALL_SPREAD) for the median to judge a goal of a
    few percent."""
    ratios = sorted(f / s for s, f in zip(rates[slow], rates[fast], strict=True))
    narrow = ratios[-1] - ratios[0] <= WALL_SPREAD
    return statistics.median(ratios), f"turns {ratios[0]:.2f}-{ratios[-1]:.2f}", narrow


def _judged(met: bool, narrow: bool) -> bool | None:
    """A wall-clock verdict, or None when the turns spread too widely to give one."""
    return met if narrow else None


def table(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The rows of the table, from a report (this run's, or a saved one)."""
    rows: list[dict[str, Any]] = []
    rates = report.get("drains", {})
    counts = report.get("instructions", {})
    median = {label: statistics.median(values) for label, values in rates.items()}
    names = {f"base{n}": name for n, name in enumerate(report["baseline_names"])}
    for lane_kind in report["lanes"]:
        prefix = "sqlite" if lane_kind == "sqlite" else "pg"
        for base, name in names.items():
            # Slower is a time ratio: this tree's drain time over the baseline's.
            slower, spread, narrow = _time_ratio(
                rates, f"{lane_kind} plain this", f"{lane_kind} plain {base}"
            )
            rows.append(
                _ratio_row(
                    "rate limits, priorities, dependencies (unused)",
                    f"{lane_kind} plain drain time, this tree / {name} (wall)",
                    slower,
                    "<= 1.03",
                    _judged(slower <= 1.03, narrow),
                    f"{spread}; medians {median[f'{lane_kind} plain this']:,.0f} vs "
                    f"{median[f'{lane_kind} plain {base}']:,.0f} runs/s",
                )
            )
            if f"{prefix}-drain {base}" in counts:
                ratio = counts[f"{prefix}-drain this"] / counts[f"{prefix}-drain {base}"]
                rows.append(
                    _ratio_row(
                        "rate limits, priorities, dependencies (unused)",
                        f"{lane_kind} plain drain instructions/run, this tree / {name}",
                        ratio,
                        "<= 1.03",
                        ratio <= 1.03,
                        f"{counts[f'{prefix}-drain this']:,.0f} vs "
                        f"{counts[f'{prefix}-drain {base}']:,.0f}",
                    )
                )
        slower, spread, narrow = _time_ratio(
            rates, f"{lane_kind} priorities this", f"{lane_kind} plain this"
        )
        rows.append(
            _ratio_row(
                "priorities (used)",
                f"{lane_kind} drain time at priorities 0/5/10 / at 0 (wall, this tree)",
                slower,
                "<= 1.03",
                _judged(slower <= 1.03, narrow),
                spread,
            )
        )
        if f"{prefix}-priorities this" in counts:
            ratio = counts[f"{prefix}-priorities this"] / counts[f"{prefix}-drain this"]
            rows.append(
                _ratio_row(
                    "priorities (used)",
                    f"{lane_kind} drain instructions/run at priorities 0/5/10 / at 0",
                    ratio,
                    "<= 1.03",
                    ratio <= 1.03,
                )
            )
        slower, spread, narrow = _time_ratio(
            rates, f"{lane_kind} progress this", f"{lane_kind} steps this"
        )
        rows.append(
            _ratio_row(
                "progress",
                f"{lane_kind} drain time of 10x1 ms tasks, 10 reports / none (wall)",
                slower,
                "<= 1.05",
                _judged(slower <= 1.05, narrow),
                spread,
            )
        )
        if f"{prefix}-steps-progress this" in counts:
            ratio = counts[f"{prefix}-steps-progress this"] / counts[f"{prefix}-steps this"]
            # The values the counted drain wrote on their own (not with the settle): none
            # unless attempts outlived a second under callgrind (bench_instructions.py).
            writes = report.get("progress_writes", {}).get(f"{prefix}-steps-progress")
            rows.append(
                _ratio_row(
                    "progress",
                    f"{lane_kind} drain instructions/run of 10x1 ms tasks, 10 reports / none",
                    ratio,
                    "<= 1.05",
                    ratio <= 1.05,
                    "" if writes is None else f"{writes} write_progress calls counted",
                )
            )
        if f"{prefix}-progress this" in counts:
            ratio = counts[f"{prefix}-progress this"] / counts[f"{prefix}-drain this"]
            rows.append(
                _ratio_row(
                    "progress",
                    f"{lane_kind} no-op drain instructions/run, 10 reports / none",
                    ratio,
                    "(none: the worst case)",
                    None,
                    "tasks that do nothing else",
                )
            )
    for result in report.get("rate_limits", []):
        what = f"{result['keys']} keys" if result["keys"] else "whole queue"
        share = result["share_of_rate_min"]
        rows.append(
            {
                "feature": "rate limits (used)",
                "compared": f"{result['lane']} {what}, {result['workers']} workers at "
                f"{result['rate']}/s: starts/s over the limit (least partition)",
                "figure": f"{share:.3f} (peak {result['peak_in_one_period']}/s, "
                f"bound {result['bound']})",
                "goal": ">= 0.90",
                "met": share >= 0.9 and result["peak_in_one_period"] <= result["bound"],
            }
        )
    for result in report.get("dependencies", []):
        started = result["callback_start_after_last_member_ms"]
        rows.append(
            {
                "feature": "dependencies (used)",
                "compared": f"{result['lane']} group of {result['members']:,}: callback start "
                "after the last member's success",
                "figure": f"{started:,.1f} ms (write {result['write_seconds']} s, drain "
                f"{result['drain_seconds']} s)",
                "goal": f"within seconds (<= {CALLBACK_GOAL_SECONDS:g} s)",
                "met": started <= CALLBACK_GOAL_SECONDS * 1000,
            }
        )
    for result in report.get("waits", []):
        rows.append(
            {
                "feature": "waits",
                "compared": f"{result['lane']} commit -> rl.runs.wait returns in another process",
                "figure": f"p50 {result['p50_ms']:.2f} ms (p90 {result['p90_ms']:.2f}, "
                f"p99 {result['p99_ms']:.2f})",
                "goal": "p50 <= 20 ms",
                "met": result["p50_ms"] <= 20,
            }
        )
    return rows


def _print_table(rows: list[dict[str, Any]]) -> None:
    print("| feature | compared | figure | goal | met |")
    print("| --- | --- | --- | --- | --- |")
    for row in rows:
        met = {True: "yes", False: "**no**", None: "n/a"}[row["met"]]  # None: cannot judge
        print(f"| {row['feature']} | {row['compared']} | {row['figure']} | {row['goal']} | {met} |")


@contextlib.contextmanager
def _server(lanes: list[str]) -> Iterator[str | None]:
    """The PostgreSQL DSN every part uses (one server for the whole spell)."""
    if "postgres" not in lanes:
        yield None
        return
    sys.path.insert(0, str(ROOT))  # for tests.support
    from tests.support.postgres_server import bench_database

    with bench_database("runlane_bench_features") as dsn:
        # The parts that start a server of their own reuse this one instead.
        os.environ["RUNLANE_BENCH_DATABASE_URL"] = dsn
        yield dsn


def _tree_name(src: Path) -> str:
    done = subprocess.run(
        ["git", "-C", str(src), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip() if done.returncode == 0 else src.parent.name


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--baseline-src",
        action="append",
        default=[],
        type=Path,
        help="the src folder of a checkout before the features (repeatable)",
    )
    parser.add_argument("--baseline-name", action="append", default=[],
                        help="a name for each --baseline-src (default: its git HEAD)")  # fmt: skip
    parser.add_argument("--lanes", default="sqlite,postgres")
    parser.add_argument("--runs", type=int, default=5000, help="runs per timed drain")
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--instructions", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--rate-seconds", type=float, default=20.0)
    parser.add_argument("--members", type=int, default=10_000)
    parser.add_argument("--wait-samples", type=int, default=200)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--table-from", type=Path, help="print the table of a saved --json report")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--lane-kind", help=argparse.SUPPRESS)
    parser.add_argument("--target", help=argparse.SUPPRESS)
    parser.add_argument("--schema", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        asyncio.run(_drain_child(args.child, args.lane_kind, args.target, args.schema, args.runs))
        return
    if args.table_from:
        saved = json.loads(args.table_from.read_text())
        _print_report({**saved, "rows": table(saved)})
        return
    lanes = [lane for lane in args.lanes.split(",") if lane]
    baselines = [src.resolve() for src in args.baseline_src]
    names = args.baseline_name + [_tree_name(src) for src in baselines[len(args.baseline_name) :]]
    if args.instructions and shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not on the PATH (or pass --no-instructions)")
    report: dict[str, Any] = {"lanes": lanes, "baseline_names": names, "load": []}
    started = time.monotonic()
    with _server(lanes) as dsn:
        report["load"].append(os.getloadavg())
        report["drains"] = drains_in_turns(lanes, baselines, args.runs, args.turns, dsn)
        report["load"].append(os.getloadavg())
        report["rate_limits"] = rate_limits(lanes, args.rate_seconds, dsn)
        report["dependencies"] = dependencies(lanes, args.members, dsn)
        report["waits"] = waits(lanes, args.wait_samples)
        report["load"].append(os.getloadavg())
        if args.instructions:
            report["instructions"] = instructions(lanes, baselines, dsn)
            report["progress_writes"] = {
                workload: calls for workload, (calls, _) in counting_writes().items()
            }
    report["minutes"] = round((time.monotonic() - started) / 60, 1)
    report["rows"] = table(report)
    if args.json:
        print(json.dumps(report, indent=2))
        return
    _print_report(report)


def _print_report(report: dict[str, Any]) -> None:
    _print_table(report["rows"])
    loads = ", ".join(f"{one[0]:.1f}" for one in report["load"])
    print(f"\n{report['minutes']} min; load average (1 min) along the way: {loads}")
    for label, values in report["drains"].items():
        print(f"  {label:28} " + " ".join(f"{value:8,.0f}" for value in values) + " runs/s")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
