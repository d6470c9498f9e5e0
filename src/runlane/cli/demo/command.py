"""``runlane demo``: trigger a few thousand runs on SQLite and drain them, with a summary."""

from __future__ import annotations

import asyncio
import random
import secrets
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from runlane import Attempt, Observer, Runlane, WorkerMode
from runlane.cli.demo.app import build_runtime, plan_payloads
from runlane.cli.demo.fanout import FanOutResult, build_fanout_runtime, run_fanout
from runlane.cli.demo.tally import DemoTally, QueueTally
from runlane.cli.output import console, print_json
from runlane.cli.params import json_option
from runlane.operator import active_run_count

DEFAULT_RUNS = 5000
DEFAULT_CONCURRENCY = 32
#: Messages the fan-out publishes (each reaches two or three subscriptions).
DEFAULT_MESSAGES = 40
#: Drain-mode workers stop when nothing is due; retries and releases come due this soon.
DRAIN_PAUSE_SECONDS = 0.02


@dataclass
class DemoResult:
    """Timings and counts of one demo."""

    runs: int
    trigger_seconds: float
    drain_seconds: float
    completed: bool
    tally: DemoTally
    environment: str
    fanout: FanOutResult | None = None

    @property
    def wall_seconds(self) -> float:
        """Triggering plus draining."""
        return self.trigger_seconds + self.drain_seconds

    def as_dict(self) -> dict[str, Any]:
        """JSON form of the summary."""
        return {
            "runs": self.runs,
            "completed": self.completed,
            "wall_seconds": round(self.wall_seconds, 3),
            "trigger_seconds": round(self.trigger_seconds, 3),
            "drain_seconds": round(self.drain_seconds, 3),
            "runs_per_second": round(self.runs / self.wall_seconds, 1),
            "totals": self.tally.totals().as_dict(),
            "queues": {name: entry.as_dict() for name, entry in sorted(self.tally.queues.items())},
            "environment": self.environment,
            "fan_out": self.fanout.as_dict() if self.fanout is not None else None,
        }


@click.command(short_help="Trigger and drain a few thousand demo runs on SQLite.")
@click.option("--runs", "total", default=DEFAULT_RUNS, show_default=True, type=click.IntRange(1))
@click.option(
    "--db",
    type=click.Path(dir_okay=False, path_type=Path),
    help="SQLite file to use and keep (default: a temporary file, removed afterwards).",
)
@click.option(
    "--concurrency", default=DEFAULT_CONCURRENCY, show_default=True, type=click.IntRange(1)
)
@click.option("--seed", type=int, help="Seed for which runs fail, retry and release.")
@click.option(
    "--messages",
    default=DEFAULT_MESSAGES,
    show_default=True,
    type=click.IntRange(0),
    help="Messages the topic fan-out publishes afterwards (0: skip it).",
)
@json_option
def demo(
    total: int,
    db: Path | None,
    concurrency: int,
    seed: int | None,
    messages: int,
    as_json: bool,
) -> None:
    """Trigger RUNS runs on SQLite (emails, reports, billing; some retry, fail or release)
    and drain them with a worker; then publish orders to a topic with three subscriptions,
    replay the one that was dead-lettered, and print what happened."""
    with _database(db) as path:
        environment = f"demo-{secrets.token_hex(4)}"
        runtime = build_runtime(path, environment=environment)
        result = asyncio.run(
            _run_demo(runtime, total, concurrency, random.Random(seed), show_progress=not as_json)
        )
        if result.completed and messages:
            fanout = build_fanout_runtime(path, environment=f"{environment}-topics")
            result.fanout = asyncio.run(run_fanout(fanout, messages, concurrency))
    if as_json:
        print_json({**result.as_dict(), "db": str(db) if db else None})
    else:
        _print_summary(result, concurrency, db)
    if not result.completed:
        raise SystemExit(130)


@contextmanager
def _database(chosen: Path | None) -> Iterator[Path]:
    if chosen is not None:
        yield chosen
        return
    with tempfile.TemporaryDirectory(prefix="runlane-demo-", ignore_cleanup_errors=True) as folder:
        yield Path(folder) / "demo.db"


async def _run_demo(
    rl: Runlane, total: int, concurrency: int, rng: random.Random, *, show_progress: bool
) -> DemoResult:
    tally = DemoTally()
    async with rl:
        started = time.perf_counter()
        for definition, payloads in plan_payloads(total, rng):
            await rl.trigger_many(definition, payloads)
        triggered = time.perf_counter()
        if show_progress:
            console().print(
                f"triggered {total:,} runs in {triggered - started:.2f}s; "
                f"draining them with {concurrency} worker slots"
            )
        with _progress(total, show_progress) as advance:
            rl.add_observer(_Tallying(tally, advance))
            completed = await _drain(rl, concurrency)
            drained = time.perf_counter()
        tally.adopt_final_counts(await rl.queue_stats())
    return DemoResult(
        runs=total,
        trigger_seconds=triggered - started,
        drain_seconds=drained - triggered,
        completed=completed,
        tally=tally,
        environment=rl.environment,
    )


class _Tallying(Observer):
    """Counts each settled attempt into the tally and advances the progress bar."""

    def __init__(self, tally: DemoTally, advance: Callable[[], None]) -> None:
        self._tally = tally
        self._advance = advance

    def settled(self, attempt: Attempt) -> None:
        if attempt.settled is not None and self._tally.record(attempt.settled):
            self._advance()


async def _drain(rl: Runlane, concurrency: int) -> bool:
    """Drain until no run is active; ``False`` if interrupted (Ctrl-C, SIGTERM)."""
    while True:
        worker = rl.worker(mode=WorkerMode.DRAIN, concurrency=concurrency)
        await worker.run()
        if worker.stopping:
            return False
        if active_run_count(await rl.queue_stats()) == 0:
            return True
        await asyncio.sleep(DRAIN_PAUSE_SECONDS)


@contextmanager
def _progress(total: int, visible: bool) -> Iterator[Callable[[], None]]:
    if not visible:
        yield lambda: None
        return
    progress = Progress(
        TextColumn("[bold]draining"),
        BarColumn(),
        MofNCompleteColumn(),
        TaskProgressColumn(),
        TimeElapsedColumn(),
        console=console(),
    )
    bar = progress.add_task("runs", total=total)
    with progress:
        yield lambda: progress.advance(bar)


def _print_summary(result: DemoResult, concurrency: int, db: Path | None) -> None:
    out = console()
    overview = Table(title="runlane demo", title_justify="left", show_header=False)
    overview.add_column(style="bold")
    overview.add_column(justify="right")
    overview.add_row("runs", f"{result.runs:,}")
    overview.add_row("wall time", f"{result.wall_seconds:.2f}s")
    overview.add_row("runs/s", f"{result.runs / result.wall_seconds:,.0f}")
    overview.add_row(
        "triggered in",
        f"{result.trigger_seconds:.2f}s ({result.runs / result.trigger_seconds:,.0f} runs/s)",
    )
    overview.add_row(
        "drained in",
        f"{result.drain_seconds:.2f}s ({result.runs / result.drain_seconds:,.0f} runs/s)",
    )
    overview.add_row("worker concurrency", str(concurrency))
    if db is not None:
        overview.add_row("database", f"{db} (environment {result.environment})")
    out.print(overview)
    out.print(_queue_table(result.tally))
    if result.fanout is not None:
        out.print(_fanout_table(result.fanout))
    if not result.completed:
        out.print(
            "[yellow]interrupted: runs that had not finished stay in the database as they were."
        )


def _queue_table(tally: DemoTally) -> Table:
    table = Table(title="per queue", title_justify="left")
    columns = ("runs", "succeeded", "failed", "cancelled", "attempts", "retries", "releases")
    table.add_column("queue")
    for name in columns:
        table.add_column(name, justify="right")

    def add(name: str, entry: QueueTally, style: str = "") -> None:
        view = entry.as_dict()
        table.add_row(name, *(f"{view[column]:,}" for column in columns), style=style)

    for name, entry in sorted(tally.queues.items()):
        add(name, entry)
    add("total", tally.totals(), style="bold")
    return table


def _fanout_table(fanout: FanOutResult) -> Table:
    table = Table(title="topic fan-out", title_justify="left", show_header=False)
    table.add_column(style="bold")
    table.add_column(justify="right")
    table.add_row("messages published", f"{fanout.messages:,}")
    table.add_row("deliveries (3 subscriptions)", f"{fanout.deliveries:,}")
    table.add_row("dead-lettered", str(fanout.dead_lettered))
    table.add_row("keys it halted", str(fanout.halted_keys))
    table.add_row("replayed", str(fanout.replayed))
    table.add_row("deliveries succeeded", f"{fanout.succeeded:,}")
    return table
