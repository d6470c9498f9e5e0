"""``runlane worker``: claim and execute due runs until stopped (or drained)."""

from __future__ import annotations

import click
from rich.markup import escape

from runlane import Run, Runlane, RunStatus, WorkerMode
from runlane.cli.app import AppCommand, app_argument, with_runtime
from runlane.cli.output import STATUS_STYLES, clock_label, console, print_json_line, print_notice
from runlane.cli.params import duration, json_option
from runlane.core.maintenance import DEFAULT_MAINTENANCE_INTERVAL
from runlane.operator import run_row

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
    as_json: bool,
) -> None:
    """Execute due runs. Ctrl-C or SIGTERM stops gracefully: in-flight runs finish first.

    A polling worker also runs the maintenance duties of `runlane tick` while it is the
    environment's elected leader (one across all workers), unless --no-maintenance.
    """

    def settled(run: Run) -> None:
        if as_json:
            print_json_line({**run_row(run), "failure": _failure_text(run)})
            return
        style = STATUS_STYLES[run.status]
        failure = _failure_text(run)
        console().print(
            f"{clock_label()} {run.id} {escape(run.task_id)} attempt {run.attempt} "
            f"→ [{style}]{run.status.value}[/]" + (f" ({escape(failure)})" if failure else ""),
            soft_wrap=True,
        )

    async def action(rl: Runlane) -> int:
        running = rl.worker(
            queues=list(queues) or None,
            concurrency=concurrency,
            mode=WorkerMode.DRAIN if drain else WorkerMode.POLL,
            lease_duration=lease,
            worker_id=worker_id,
            on_progress=settled,
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
        await running.run()
        return running.executed

    executed = with_runtime(app, action)
    if not as_json:
        print_notice(f"worker stopped after {executed} attempt{'s' if executed != 1 else ''}.")


def _failure_text(run: Run) -> str | None:
    if run.failure is None or run.status not in (RunStatus.RETRYING, RunStatus.FAILED):
        return None
    return f"{run.failure.code}: {run.failure.message}"
