"""``runlane queues ...``: run counts per queue and status, and pausing queues."""

from __future__ import annotations

from typing import Any

import click
from rich.table import Table

from runlane import Runlane
from runlane.cli.app import AppCommand, app_argument, with_runtime
from runlane.cli.output import console, print_json, queues_table, short_time
from runlane.cli.params import json_option
from runlane.operator import View, queue_stats_view, queue_view


class _QueuesGroup(click.Group):
    """``runlane queues APP`` stays the counts it always was; ``runlane queues pause
    APP NAME`` and ``resume`` are subcommands beside it."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not args or (args[0] not in self.commands and args[0] not in ("--help", "-h")):
            args = ["stats", *args]
        return super().parse_args(ctx, args)


@click.group(cls=_QueuesGroup)
def queues() -> None:
    """Run counts per queue (``runlane queues APP``); pause and resume queues."""


@queues.command("stats", cls=AppCommand)
@app_argument
@json_option
def queue_counts(app: str, as_json: bool) -> None:
    """How many runs each queue holds, by status; whether it is paused; its rate limit,
    the runs waiting for its tokens and when its next token is due."""

    async def read(rl: Runlane) -> tuple[list[Any], dict[str, View]]:
        queues = {info.name: queue_view(info) for info in await rl.queues.list()}
        return await rl.queue_stats(), queues

    stats, queues = with_runtime(app, read)
    views = [
        {
            **queue_stats_view(entry),
            "paused": queues[entry.queue]["paused"],
            "rate_limit": queues[entry.queue]["rate_limit"],
            "next_token_at": queues[entry.queue]["next_token_at"],
            "limited_keys": queues[entry.queue]["limited_keys"],
        }
        for entry in stats
    ]
    if as_json:
        print_json(views)
    else:
        console().print(queues_table(views))


@queues.command("pause", cls=AppCommand)
@app_argument
@click.argument("name")
@click.option("--reason", default=None, help="Why the queue is paused (shown to operators).")
@json_option
def pause_queue(app: str, name: str, reason: str | None, as_json: bool) -> None:
    """Stop every worker from starting runs of queue NAME (running runs finish)."""
    view = queue_view(with_runtime(app, lambda rl: rl.queues.pause(name, reason=reason)))
    _print_one(view, as_json)


@queues.command("resume", cls=AppCommand)
@app_argument
@click.argument("name")
@json_option
def resume_queue(app: str, name: str, as_json: bool) -> None:
    """Let workers start runs of queue NAME again."""
    view = queue_view(with_runtime(app, lambda rl: rl.queues.resume(name)))
    _print_one(view, as_json)


def _print_one(view: View, as_json: bool) -> None:
    if as_json:
        print_json(view)
        return
    table = Table(title="queue", title_justify="left")
    for column in ("queue", "limit", "rate limit", "state", "paused at (UTC)", "reason"):
        table.add_column(column)
    limit = view["concurrency_limit"]
    table.add_row(
        view["queue"],
        "-" if limit is None else str(limit),
        view["rate_limit"] or "-",
        "paused" if view["paused"] else "active",
        short_time(view["paused_at"]),
        view["paused_reason"] or "",
    )
    console().print(table)
