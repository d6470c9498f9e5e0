"""``runlane runs ...``: list, show, follow the history of, and act on runs."""

from __future__ import annotations

from typing import Any

import click
from rich.markup import escape

from runlane import Run, Runlane, RunStatus
from runlane.cli.app import AppCommand, app_argument, with_runtime
from runlane.cli.output import (
    console,
    events_table,
    print_json,
    print_notice,
    run_detail,
    runs_table,
)
from runlane.cli.params import STATUS, duration, json_option
from runlane.operator import event_view, run_row, run_view, run_with_relations_view


@click.group()
def runs() -> None:
    """List, inspect, cancel, retry, rerun and prune runs."""


@runs.command("list", cls=AppCommand)
@app_argument
@click.option("--status", "statuses", multiple=True, type=STATUS, help="Only these statuses.")
@click.option("--task", "tasks", multiple=True, metavar="TASK_ID", help="Only these tasks.")
@click.option("--queue", "queues", multiple=True, metavar="QUEUE", help="Only these queues.")
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1, 1000))
@click.option("--cursor", help="Continue a listing from the cursor the last page printed.")
@json_option
def list_runs(
    app: str,
    statuses: tuple[str, ...],
    tasks: tuple[str, ...],
    queues: tuple[str, ...],
    limit: int,
    cursor: str | None,
    as_json: bool,
) -> None:
    """Runs, newest first, one page at a time."""

    async def action(rl: Runlane) -> tuple[list[Run], str | None, str]:
        page = await rl.runs.list(
            statuses=list(statuses),
            tasks=list(tasks),
            queues=list(queues),
            limit=limit,
            cursor=cursor,
        )
        return page.data, page.next_cursor, rl.lane.location

    found, next_cursor, location = with_runtime(app, action)
    rows = [run_row(run) for run in found]
    if as_json:
        print_json({"runs": rows, "next_cursor": next_cursor})
        return
    out = console()
    if not rows:
        # Say where we looked: an empty answer from the wrong file is easy to misread.
        out.print(f"no runs match in {escape(location)}." if location else "no runs match.")
        return
    out.print(runs_table(rows))
    if next_cursor:
        out.print(f"more runs: add --cursor {next_cursor}")


@runs.command("show", cls=AppCommand)
@app_argument
@click.argument("run_id")
@json_option
def show_run(app: str, run_id: str, as_json: bool) -> None:
    """Everything about one run, with its dependencies and dependents."""

    async def action(rl: Runlane) -> dict[str, Any]:
        return await _shown(rl, await rl.runs.get(run_id))

    _print_run(with_runtime(app, action), as_json)


async def _shown(rl: Runlane, run: Run) -> dict[str, Any]:
    """The view ``runs show`` and ``runs wait`` print: the run, its dependencies and
    its dependents."""
    dependencies = await rl.runs.dependencies(run.id)
    dependents = await rl.runs.dependents(run.id)
    return run_with_relations_view(run, dependencies, dependents)


#: ``runlane runs wait`` exit statuses: succeeded, failed or cancelled, still running.
WAIT_SUCCEEDED, WAIT_FAILED, WAIT_TIMED_OUT = 0, 1, 3


@runs.command("wait", cls=AppCommand)
@app_argument
@click.argument("run_id")
@click.option(
    "--timeout",
    default="30s",
    show_default=True,
    help="How long to wait, e.g. 30s or 5m; 'none' waits until the run finishes.",
)
@json_option
def wait_run(app: str, run_id: str, timeout: str, as_json: bool) -> None:
    """Wait until a run finishes and print it (as ``runs show`` does).

    Exit status 0 when it succeeded, 1 when it failed or was cancelled, 3 when it is
    still unfinished after the timeout (the run as it is then is printed).
    """
    limit: float | None = None if timeout.strip().lower() == "none" else _timeout(timeout)

    async def action(rl: Runlane) -> tuple[Run, bool, dict[str, Any]]:
        try:
            run, timed_out = await rl.runs.wait(run_id, timeout=limit), False
        except TimeoutError:
            run, timed_out = await rl.runs.get(run_id), True
        return run, timed_out, await _shown(rl, run)

    run, timed_out, view = with_runtime(app, action)
    if timed_out and not as_json:
        print_notice(f"run {run.id} is still {run.status.value} after {timeout}.")
    _print_run(view, as_json)
    if timed_out and not run.status.is_terminal:
        raise SystemExit(WAIT_TIMED_OUT)
    raise SystemExit(WAIT_SUCCEEDED if run.status is RunStatus.SUCCEEDED else WAIT_FAILED)


def _timeout(value: str) -> float:
    try:
        return duration(value)
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--timeout") from None


@runs.command("events", cls=AppCommand)
@app_argument
@click.argument("run_id")
@json_option
def run_events(app: str, run_id: str, as_json: bool) -> None:
    """A run's event history, oldest first."""
    events = with_runtime(app, lambda rl: rl.runs.events(run_id))
    views = [event_view(event) for event in events]
    if as_json:
        print_json(views)
    else:
        console().print(events_table(views, title=f"events of run {run_id}"))


@runs.command("cancel", cls=AppCommand)
@app_argument
@click.argument("run_id")
@click.option("--reason", help="Why; stored on the run and in its history.")
@json_option
def cancel_run(app: str, run_id: str, reason: str | None, as_json: bool) -> None:
    """Cancel a waiting run now, or ask a running one to stop."""
    run = with_runtime(app, lambda rl: rl.runs.cancel(run_id, reason))
    if not as_json:
        print_notice(f"run {run.id} is {run.status.value}.")
    _print_run(run_view(run), as_json)


@runs.command("retry", cls=AppCommand)
@app_argument
@click.argument("run_id")
@json_option
def retry_run(app: str, run_id: str, as_json: bool) -> None:
    """Start a failed run again, as a new run linked to it."""
    run = with_runtime(app, lambda rl: rl.runs.retry(run_id))
    if not as_json:
        print_notice(f"retrying failed run {run_id} as new run {run.id}.")
    _print_run(run_view(run), as_json)


@runs.command("rerun", cls=AppCommand)
@app_argument
@click.argument("run_id")
@json_option
def rerun_run(app: str, run_id: str, as_json: bool) -> None:
    """Run a finished run's task and payload again, as a new run linked to it."""
    run = with_runtime(app, lambda rl: rl.runs.rerun(run_id))
    if not as_json:
        print_notice(f"rerunning run {run_id} as new run {run.id}.")
    _print_run(run_view(run), as_json)


@runs.command("prune", cls=AppCommand)
@app_argument
@click.option("--older-than", required=True, type=duration, help="Age of the last update, e.g. 7d.")
@click.option(
    "--status",
    "statuses",
    multiple=True,
    type=STATUS,
    help="Only these finished statuses (default: all finished runs).",
)
@json_option
def prune_runs(app: str, older_than: float, statuses: tuple[str, ...], as_json: bool) -> None:
    """Delete finished runs, and their history, not updated for a while."""
    pruned = with_runtime(
        app, lambda rl: rl.runs.prune(older_than=older_than, statuses=list(statuses) or None)
    )
    if as_json:
        print_json({"pruned": pruned})
    else:
        console().print(f"pruned {pruned} run{'s' if pruned != 1 else ''}.")


def _print_run(view: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print_json(view)
    else:
        console().print(run_detail(view))
