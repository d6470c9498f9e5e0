"""``runlane tick`` (maintenance, once or on an interval) and ``runlane migrate``."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from datetime import UTC, datetime

import click
from rich.table import Table

from runlane import Runlane, RunlaneError
from runlane.cli.app import AppCommand, app_argument, with_runtime
from runlane.cli.observe import metrics_options, serving_metrics
from runlane.cli.output import (
    clock_label,
    console,
    print_error,
    print_json,
    print_json_line,
    print_notice,
)
from runlane.cli.params import duration, json_option
from runlane.core.backoff import connect_when_reachable
from runlane.operator import View, tick_report_view

logger = logging.getLogger("runlane.maintenance")


@click.command(cls=AppCommand)
@app_argument
@click.option(
    "--every",
    type=duration,
    help="Tick again at this interval (e.g. 5s) until Ctrl-C or SIGTERM.",
)
@metrics_options
@json_option
def tick(
    app: str, every: float | None, metrics_port: int | None, metrics_host: str, as_json: bool
) -> None:
    """Run maintenance: recover expired leases, finish orphaned cancellations, and the rest.

    Without --every it runs one pass and prints what each duty did. With
    --every it logs one line per pass and stops after the pass in progress
    when interrupted.
    """
    if every is None:
        if metrics_port is not None:
            raise click.BadParameter("needs --every (a single pass is over at once).")
        view = tick_report_view(with_runtime(app, lambda rl: rl.tick()))
        if as_json:
            print_json(view)
        else:
            console().print(_report_table(view))
        return
    if every <= 0:
        raise click.BadParameter("must be longer than zero.", param_hint="--every")

    async def action(rl: Runlane) -> None:
        with serving_metrics(rl, metrics_port, metrics_host):
            await _tick_forever(rl, every, as_json)

    # The loop opens the lane itself, waiting while the storage is unavailable (started
    # during a database restart or outage), as a polling worker does.
    with_runtime(app, action, open_first=False)


async def _tick_forever(rl: Runlane, every: float, as_json: bool) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    installed = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
            installed.append(sig)
    if not as_json:
        print_notice(f"ticking every {every:g}s; Ctrl-C stops after the current pass.")
    passes = 0
    try:
        connected = await connect_when_reachable(rl.open, stop, "tick", logger)
        while connected and not stop.is_set():
            started = time.monotonic()
            passes += 1
            try:
                view = tick_report_view(await rl.tick())
            except RunlaneError as error:
                # A storage hiccup must not end the maintenance loop; the next pass retries.
                print_error(error)
            else:
                _log_pass(passes, view, as_json)
            remaining = max(0.0, every - (time.monotonic() - started))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), remaining)
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)
    if not as_json:
        print_notice(f"stopped after {passes} pass{'es' if passes != 1 else ''}.")


def _log_pass(number: int, view: View, as_json: bool) -> None:
    if as_json:
        at = datetime.now(UTC).isoformat(timespec="seconds")
        print_json_line({"pass": number, "at": at, **view})
        return
    done = ", ".join(f"{name}={count}" for name, count in view.items() if count and name != "total")
    console().print(f"{clock_label()} tick #{number}: {done or 'nothing to do'}", soft_wrap=True)


def _report_table(view: View) -> Table:
    table = Table(title="tick", title_justify="left")
    table.add_column("duty")
    table.add_column("count", justify="right")
    for name, count in view.items():
        table.add_row(name.replace("_", " "), str(count), style="bold" if name == "total" else "")
    return table


@click.command(cls=AppCommand)
@app_argument
@json_option
def migrate(app: str, as_json: bool) -> None:
    """Create or upgrade the storage schema (safe to run again)."""
    applied = with_runtime(app, lambda rl: rl.migrate(), open_first=False)
    if as_json:
        print_json({"applied": applied})
    elif applied:
        console().print("applied migrations: " + ", ".join(applied))
    else:
        console().print("schema is up to date.")
