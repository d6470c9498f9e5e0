"""CPU per job of the peers harness's drains, in turns: where a drain row's time goes.

The peers harness (``../shared/peers-bench``, used from a writable copy) times each
library's drain but does not say what it costs. This runs the harness's own
``process`` test for a few variants in turns and reads, over about the span the
harness times (from when it has read the first worker's READY line until its poll
finds nothing pending; the harness's clock starts at the READY line's own time),
the CPU the whole machine spent per job and the CPU the PostgreSQL server spent per
job. On a 2-core machine where server and workers share the cores, a drain is
CPU-bound, so these figures say what a ratio between two rows is made of.

Run it from the harness copy, with the harness's Python, once its cluster is up::

    cd <harness copy> && ./pg-up
    .venv/bin/python <checkout>/bench/bench_peers_cpu.py                # 3 turns
    .venv/bin/python <checkout>/bench/bench_peers_cpu.py --variants runlane,pgqueuer --turns 5

Between the variants of a turn it also runs ``bench_drain_floor.py --ways floor`` on
the same server with the checkout's Python (``--no-floor`` leaves it out): Runlane's
own claim and settle statements sent by a bare loop, 2 processes x 100, the most the
tuned drain could get with no runtime around its statements.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import importlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

CHECKOUT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(CHECKOUT / "bench"))

from cpu_counters import machine_cpu_seconds, per_run, server_cpu_seconds  # noqa: E402

DEFAULT_DSN = "postgresql://bench@127.0.0.1:55432/bench"
DEFAULT_VARIANTS = "runlane-tuned,pgqueuer-tuned"
JOBS = 20_000


def _variants(path: Path) -> dict[str, tuple[str, str]]:
    """variants.tsv: label -> (peer module, settings JSON)."""
    found: dict[str, tuple[str, str]] = {}
    with path.open(encoding="utf-8") as table:
        for row in csv.reader(table, delimiter="\t"):
            if len(row) >= 4 and not row[0].startswith("#"):
                found[row[0]] = (row[1], row[3])
    return found


def _counters() -> tuple[float | None, float | None]:
    return machine_cpu_seconds(), server_cpu_seconds()


def drain(label: str, peer: str, settings: str, dsn: str, jobs: int) -> dict[str, Any]:
    """The harness's ``process`` test of one variant, with the CPU it spent per job."""
    run_one = importlib.import_module("harness.run_one")
    module = importlib.import_module(f"harness.peer_{peer}")
    marks: dict[str, tuple[float | None, float | None]] = {}
    ready, pending = run_one.Worker.ready, module.Peer.pending

    async def counted_ready(self: Any, *args: Any) -> float:
        at = await ready(self, *args)
        marks.setdefault("start", _counters())  # the first READY starts the harness's clock
        return float(at)

    async def counted_pending(self: Any) -> bool:
        left = bool(await pending(self))
        if not left:
            marks["end"] = _counters()  # the poll that stops the clock
        return left

    run_one.Worker.ready, module.Peer.pending = counted_ready, counted_pending
    try:
        with tempfile.TemporaryDirectory(prefix="peers-cpu.") as logs:
            args = argparse.Namespace(
                peer=peer, test="process", dsn=dsn, n=jobs, rate=100.0, settings=settings,
                timeout=240.0, logdir=logs, label=label, out="",
            )  # fmt: skip
            record: dict[str, Any] = asyncio.run(run_one.run(args))
    finally:
        run_one.Worker.ready, module.Peer.pending = ready, pending
    if not record.get("ok") or "start" not in marks or "end" not in marks:
        raise SystemExit(f"{label}: the drain did not complete: {record}")
    (machine_0, server_0), (machine_1, server_1) = marks["start"], marks["end"]
    return {
        "jobs_per_s": record["jobs_per_s"],
        "machine_cpu_us_per_job": per_run(machine_0, machine_1, jobs),
        "server_cpu_us_per_job": per_run(server_0, server_1, jobs),
    }


def floor(python: str, dsn: str, jobs: int) -> dict[str, Any]:
    """One round of bench_drain_floor.py's floor on ``dsn``."""
    command = [python, str(CHECKOUT / "bench" / "bench_drain_floor.py")]
    command += ["--ways", "floor", "--rounds", "1", "--runs", str(jobs), "--json"]
    env = {**os.environ, "RUNLANE_BENCH_DATABASE_URL": dsn}
    out = subprocess.run(command, env=env, check=True, capture_output=True, text=True).stdout
    row = json.loads(out)["floor"]
    return {
        "jobs_per_s": row["runs_per_s"],
        "machine_cpu_us_per_job": row["machine_cpu_us_per_run"],
        "server_cpu_us_per_job": row["server_cpu_us_per_run"],
    }


def main() -> None:
    """Parse options, run the turns, print each turn and the medians."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variants", default=DEFAULT_VARIANTS, help="Labels of variants.tsv.")
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=JOBS)
    parser.add_argument("--dsn", default=os.environ.get("BENCH_DSN", DEFAULT_DSN))
    parser.add_argument("--no-floor", action="store_true", help="Leave the floor out.")
    parser.add_argument(
        "--floor-python",
        default=str(CHECKOUT / ".venv" / "bin" / "python"),
        help="The checkout's Python, for bench_drain_floor.py (default: its .venv).",
    )
    parser.add_argument("--json", action="store_true", help="Print JSON.")
    args = parser.parse_args()
    if not Path("harness/run_one.py").is_file():
        parser.error("run this from the peers harness's folder, with its Python")
    sys.path.insert(0, os.getcwd())
    table = _variants(Path("variants.tsv"))
    labels = [label for label in args.variants.split(",") if label]
    unknown = [label for label in labels if label not in table]
    if unknown:
        parser.error(f"not in variants.tsv: {', '.join(unknown)}")
    ways: list[tuple[str, Callable[[], dict[str, Any]]]] = []
    for label in labels:
        peer, settings = table[label]
        ways.append(
            (label, lambda n=label, p=peer, s=settings: drain(n, p, s, args.dsn, args.jobs))
        )
    if not args.no_floor:
        ways.insert(1, ("floor", lambda: floor(args.floor_python, args.dsn, args.jobs)))
    turns: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in ways}
    for turn in range(1, max(1, args.turns) + 1):
        for name, measure in ways:
            result = measure()
            turns[name].append(result)
            if not args.json:
                print(f"turn {turn} {name:16} " + _row(result), flush=True)
    medians = {
        name: {
            key: statistics.median(r[key] for r in rows if r[key] is not None)
            if any(r[key] is not None for r in rows)
            else None
            for key in rows[0]
        }
        for name, rows in turns.items()
    }
    if args.json:
        print(json.dumps({"turns": turns, "medians": medians}, indent=2))
        return
    print(f"medians of {args.turns} turns, {args.jobs:,} jobs each:")
    for name, row in medians.items():
        print(f"        {name:16} " + _row(row))
    first = labels[0]
    for name in medians:
        if name != first:
            ratios = [
                a["jobs_per_s"] / b["jobs_per_s"]
                for a, b in zip(turns[first], turns[name], strict=True)
            ]
            print(f"{first} / {name} per turn: " + ", ".join(f"{r:.2f}x" for r in ratios))


def _row(result: dict[str, Any]) -> str:
    show: Callable[[float | None], str] = lambda v: "-" if v is None else f"{v:,.0f}"  # noqa: E731
    rate, machine = show(result["jobs_per_s"]), show(result["machine_cpu_us_per_job"])
    server = show(result["server_cpu_us_per_job"])
    return f"{rate:>8} jobs/s  machine {machine:>4} µs/job  server {server:>4} µs/job"


if __name__ == "__main__":
    main()
