"""``runlane worker``: claim and execute due runs until stopped (or drained)."""

from __future__ import annotations

import contextlib

import click
from rich.markup import escape

from runlane import Runlane, WorkerMode
from runlane.cli.app import AppCommand, app_argument, with_runtime
from runlane.cli.observe import LiveLines, drain_progress, metrics_options, serving_metrics
from runlane.cli.output import console, print_notice
from runlane.cli.params import duration, json_option
from runlane.core.maintenance import DEFAULT_MAINTENANCE_INTERVAL
from runlane.operator import active_run_count

DEFAULT_CONCURRENCY = 10


@click.command(cls=AppCommand)
@app_argument
@click.option(
    "--queue",
    "queues",
    multiple=True,
    metavar="QUEUE",
    help="Only claim from these queues (repeatable; default: every registered queue).",
)
@click.option(
    "--concurrency",
    default=DEFAULT_CONCURRENCY,
    show_default=True,
    type=click.IntRange(min=1),
    help="Runs executed at once by this process.",
)
@click.option("--drain", is_flag=True, help="Exit once no due run is left instead of polling.")
@click.option("--lease", type=duration, help="Lease duration, e.g. 30s (default: the runtime's).")
@click.option("--worker-id", help="Name shown as the lease owner (default: host-pid-random).")
@click.option(
    "--no-maintenance",
    is_flag=True,
    help="Leave the maintenance duties (schedules, lease recovery, pruning) to `runlane tick`.",
)
@click.option(
    "--maintenance-interval",
    type=duration,
    default=DEFAULT_MAINTENANCE_INTERVAL,
    show_default=True,
    help="Seconds between maintenance passes while this worker is the elected leader.",
)
@click.option(
    "--quiet",
    "-q",
    is_flag=True,
    help="No line (or progress bar) per run; only the start and stop notices.",
)
@metrics_options
@json_option
def worker(
    app: str,
    queues: tuple[str, ...],
    concurrency: int,
    drain: bool,
    lease: float | None,
    worker_id: str | None,
    no_maintenance: bool,
    maintenance_interval: float,
    quiet: bool,
    metrics_port: int | None,
    metrics_host: str,
    as_json: bool,
) -> None:
    """Execute due runs. Ctrl-C or SIGTERM stops gracefully: in-flight runs finish first.

    A polling worker also runs the maintenance duties of `runlane tick` while it is the
    environment's elected leader (one across all workers), unless --no-maintenance.

    Each settled attempt prints one line (a release with its reason). With --drain
    on a terminal a progress bar replaces the lines; --quiet prints neither.
    """

    async def action(rl: Runlane) -> int:
        running = rl.worker(
            queues=list(queues) or None,
            concurrency=concurrency,
            mode=WorkerMode.DRAIN if drain else WorkerMode.POLL,
            lease_duration=lease,
            worker_id=worker_id,
            maintenance=not no_maintenance,
            maintenance_interval=maintenance_interval,
        )
        if not as_json:
            names = ", ".join(policy.name for policy in running.queues)
            mode = "draining" if drain else "polling (Ctrl-C to stop)"
            if not drain and running.maintenance_interval is not None:
                mode += ", maintenance when elected leader"
            where = f"; storage {escape(rl.lane.location)}" if rl.lane.location else ""
            print_notice(
                f"worker {running.worker_id}: queues {names}; concurrency {concurrency}; "
                f"{mode}{where}."
            )
        with contextlib.ExitStack() as stack:
            stack.enter_context(serving_metrics(rl, metrics_port, metrics_host))
            if not quiet:
                if drain and not as_json and console().is_terminal:
                    total = active_run_count(await rl.queue_stats())
                    stack.enter_context(drain_progress(rl, total))
                else:
                    rl.add_observer(LiveLines(as_json=as_json))
            await running.run()
        return running.executed

    # A polling worker opens the lane itself, waiting while the storage is unavailable
    # (started during a database restart or outage); a drain fails at once instead.
    executed = with_runtime(app, action, open_first=drain)
    if not as_json:
        print_notice(f"worker stopped after {executed} attempt{'s' if executed != 1 else ''}.")
