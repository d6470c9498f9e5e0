"""``runlane schedules ...``: list schedules with their next fire time; pause and resume them."""

from __future__ import annotations

from collections.abc import Iterable

import click
from rich.table import Table

from runlane.cli.app import AppCommand, app_argument, with_runtime
from runlane.cli.output import console, print_json, short_time
from runlane.cli.params import json_option
from runlane.operator import View, schedule_view


@click.group()
def schedules() -> None:
    """List, pause and resume schedules."""


@schedules.command("list", cls=AppCommand)
@app_argument
@json_option
def list_schedules(app: str, as_json: bool) -> None:
    """Every registered schedule, its state and when it fires next."""
    views = [schedule_view(info) for info in with_runtime(app, lambda rl: rl.schedules.list())]
    if as_json:
        print_json(views)
    elif views:
        console().print(_schedules_table(views))
    else:
        console().print("no schedules are registered.")


@schedules.command("pause", cls=AppCommand)
@app_argument
@click.argument("schedule_id")
@json_option
def pause_schedule(app: str, schedule_id: str, as_json: bool) -> None:
    """Stop materialising a schedule until it is resumed (survives restarts)."""
    view = schedule_view(with_runtime(app, lambda rl: rl.schedules.pause(schedule_id)))
    _print_one(view, as_json)


@schedules.command("resume", cls=AppCommand)
@app_argument
@click.argument("schedule_id")
@json_option
def resume_schedule(app: str, schedule_id: str, as_json: bool) -> None:
    """Materialise a paused schedule again."""
    view = schedule_view(with_runtime(app, lambda rl: rl.schedules.resume(schedule_id)))
    _print_one(view, as_json)


def _print_one(view: View, as_json: bool) -> None:
    if as_json:
        print_json(view)
    else:
        console().print(_schedules_table([view]))


def _schedules_table(views: Iterable[View]) -> Table:
    table = Table(title="schedules", title_justify="left")
    for name in ("schedule", "task", "kind", "expression", "timezone", "state"):
        table.add_column(name)
    table.add_column("last fired (UTC)", no_wrap=True)
    table.add_column("next fire (UTC)", no_wrap=True)
    for view in views:
        state = "disabled" if not view["enabled"] else "paused" if view["paused"] else "active"
        table.add_row(
            view["id"],
            view["task_id"],
            view["kind"],
            view["expression"],
            view["timezone"],
            state,
            short_time(view["last_fired_at"]),
            short_time(view["next_fire_at"]),
        )
    return table
