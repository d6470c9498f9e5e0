"""``runlane queues``: run counts per queue and status."""

from __future__ import annotations

import click

from runlane.cli.app import AppCommand, app_argument, with_runtime
from runlane.cli.output import console, print_json, queues_table
from runlane.cli.params import json_option
from runlane.operator import queue_stats_view


@click.command(cls=AppCommand)
@app_argument
@json_option
def queues(app: str, as_json: bool) -> None:
    """How many runs each queue holds, by status."""
    stats = with_runtime(app, lambda rl: rl.queue_stats())
    views = [queue_stats_view(entry) for entry in stats]
    if as_json:
        print_json(views)
    else:
        console().print(queues_table(views))
