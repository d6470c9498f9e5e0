"""``runlane trigger``: create one run from the command line."""

from __future__ import annotations

from typing import Any

import click

from runlane.cli.app import AppCommand, app_argument, with_runtime
from runlane.cli.output import console, print_json, print_notice, run_detail
from runlane.cli.params import duration, json_document, json_option
from runlane.operator import run_view


@click.command(cls=AppCommand)
@app_argument
@click.argument("task_id")
@click.option(
    "--payload", type=json_document, metavar="JSON", help="The payload as JSON (default: null)."
)
@click.option("--delay", type=duration, help="Run no earlier than this from now, e.g. 10s.")
@click.option("--queue", help="Put the run on this queue instead of the task's own.")
@click.option("--idempotency-key", help="Return the run owning this key instead of a new one.")
@click.option("--singleton-key", help="At most one active run of the task with this key.")
@click.option("--concurrency-key", help="Partition of a bounded queue.")
@click.option(
    "--priority",
    type=int,
    default=0,
    show_default=True,
    help="-10 to 10: higher starts first among the queue's due runs.",
)
@click.option(
    "--after",
    "after",
    multiple=True,
    metavar="RUN_ID",
    help="Wait for this run to finish first (repeat for several).",
)
@click.option(
    "--on-failure",
    type=click.Choice(["cancel", "run"]),
    default="cancel",
    show_default=True,
    help="With --after: cancel the run if a dependency fails, or run it anyway.",
)
@json_option
def trigger(
    app: str,
    task_id: str,
    payload: Any,
    delay: float | None,
    queue: str | None,
    idempotency_key: str | None,
    singleton_key: str | None,
    concurrency_key: str | None,
    priority: int,
    after: tuple[str, ...],
    on_failure: str,
    as_json: bool,
) -> None:
    """Create a run of TASK_ID (it has committed when this prints)."""
    run = with_runtime(
        app,
        lambda rl: rl.trigger(
            task_id,
            payload,
            queue=queue,
            delay=delay,
            idempotency_key=idempotency_key,
            singleton_key=singleton_key,
            concurrency_key=concurrency_key,
            after=list(after) or None,
            on_failure=on_failure,
            priority=priority,
        ),
    )
    view = run_view(run)
    if as_json:
        print_json(view)
        return
    print_notice(f"run {run.id} of {run.task_id} is {run.status.value}.")
    console().print(run_detail(view))
