"""``runlane groups ...``: follow a group's progress (``rl.trigger_group``)."""

from __future__ import annotations

from typing import Any

import click

from runlane import Runlane
from runlane.cli.app import AppCommand, app_argument, with_runtime
from runlane.cli.output import console, print_json, run_detail, runs_table
from runlane.cli.params import json_option
from runlane.operator import group_view, run_row


@click.group()
def groups() -> None:
    """Follow groups: done/total, failures, members."""


@groups.command("show", cls=AppCommand)
@app_argument
@click.argument("group_id")
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1, 1000))
@json_option
def show_group(app: str, group_id: str, limit: int, as_json: bool) -> None:
    """A group's progress and its first members."""

    async def action(rl: Runlane) -> dict[str, Any]:
        view = group_view(await rl.groups.get(group_id))
        page = await rl.runs.list(group=group_id, limit=limit)
        view["members"] = [run_row(run) for run in page.data]
        return view

    view = with_runtime(app, action)
    if as_json:
        print_json(view)
        return
    members = view.pop("members")
    console().print(run_detail(view))
    console().print(runs_table(members, title=f"members (first {limit})"))
