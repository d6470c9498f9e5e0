"""Rendering views for people (rich tables) and for programs (JSON)."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from functools import cache
from typing import Any

import click
from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from runlane import RunlaneError, RunStatus
from runlane.operator import View

#: Width used when output goes to a file or pipe and $COLUMNS says nothing.
PIPE_WIDTH = 200

STATUS_STYLES = {
    RunStatus.QUEUED: "cyan",
    RunStatus.WAITING: "bright_black",
    RunStatus.SCHEDULED: "blue",
    RunStatus.RUNNING: "yellow",
    RunStatus.RETRYING: "magenta",
    RunStatus.RELEASED: "bright_blue",
    RunStatus.CANCELLATION_REQUESTED: "dark_orange",
    RunStatus.SUCCEEDED: "green",
    RunStatus.FAILED: "bold red",
    RunStatus.CANCELLED: "dim",
    RunStatus.DEAD_LETTERED: "bold red",
    RunStatus.DISCARDED: "dim",
}

#: Shorter column headers where the status name is long.
#: WAITING runs wait for other runs; the "waiting" column counts runs waiting to start.
STATUS_LABELS = {RunStatus.CANCELLATION_REQUESTED: "cancelling", RunStatus.WAITING: "on deps"}


@cache
def console(*, stderr: bool = False) -> Console:
    """The shared console for stdout (or stderr); tables stay readable when piped."""
    out = Console(stderr=stderr, highlight=False)
    if not out.is_terminal and "COLUMNS" not in os.environ:
        out.width = PIPE_WIDTH
    return out


def print_json(data: Any) -> None:
    """Pretty JSON on stdout."""
    click.echo(json.dumps(data, indent=2, ensure_ascii=False, default=str))


def print_json_line(data: Any) -> None:
    """One compact JSON object per line (streams: worker and tick logs)."""
    click.echo(json.dumps(data, ensure_ascii=False, default=str, separators=(",", ":")))


#: Under ``runlane --log-format json`` every stderr line is a JSON log record: notices
#: and errors go through this logger instead of the console.
cli_logger = logging.getLogger("runlane.cli")
_json_logs = False


def use_json_logs(enabled: bool) -> None:
    """Send notices and errors to the ``runlane.cli`` logger (``--log-format json``)."""
    global _json_logs
    _json_logs = enabled


def json_logs_enabled() -> bool:
    """Whether ``--log-format json`` is in effect."""
    return _json_logs


def print_error(error: RunlaneError) -> None:
    """One red line on stderr: the error code, then the message."""
    if _json_logs:
        cli_logger.error(
            error.message,
            extra={"event": "cli.error", "error_code": error.code.value, "meta": error.meta},
        )
        return
    # A message may quote caller input that is not UTF-8; escape it rather than fail.
    message = error.message.encode(errors="backslashreplace").decode()
    line = Text.assemble((f"error[{error.code.value}]", "bold red"), ": ", (message, "red"))
    console(stderr=True).print(line, soft_wrap=True)


def print_error_json(error: RunlaneError) -> None:
    """The error as one JSON object on stdout, where ``--json`` readers look."""
    print_json_line({"code": error.code.value, "message": error.message, "meta": error.meta})


def print_notice(message: str) -> None:
    """A status line for people, on stderr so stdout stays clean for data."""
    if _json_logs:
        cli_logger.info(message)
        return
    console(stderr=True).print(message, soft_wrap=True)


def clock_label() -> str:
    """The time now, ``HH:MM:SS`` in UTC, for log lines."""
    return datetime.now(UTC).strftime("%H:%M:%S")


def status_text(status: str) -> Text:
    """A run status in its colour."""
    return Text(status, style=STATUS_STYLES.get(RunStatus(status), ""))


def short_time(value: str | None) -> str:
    """``2025-01-31 12:00:00`` from an ISO time in UTC (tables say the zone in the header)."""
    return value[:19].replace("T", " ") if value else "-"


def compact_json(value: Any) -> str:
    """JSON on one line, for table cells."""
    return json.dumps(value, ensure_ascii=False, default=str, separators=(",", ":"))


def runs_table(rows: Sequence[View], *, title: str | None = None) -> Table:
    """A listing of runs (rows from :func:`runlane.operator.run_row`)."""
    table = Table(title=title, title_justify="left")
    table.add_column("run id", no_wrap=True)
    table.add_column("task")
    table.add_column("queue")
    table.add_column("status", no_wrap=True)
    table.add_column("attempt", justify="right")
    # Priority only when a run of the page has one: most queues never use them.
    prioritised = any(row.get("priority") for row in rows)
    if prioritised:
        table.add_column("priority", justify="right")
    table.add_column("run at (UTC)", no_wrap=True)
    table.add_column("updated (UTC)", no_wrap=True)
    table.add_column("progress", no_wrap=True)
    for row in rows:
        progress = row.get("progress")
        table.add_row(
            row["id"],
            Text(row["task_id"]),  # Text, not markup: names may hold brackets
            Text(row["queue"]),
            status_text(row["status"]),
            str(row["attempt"]),
            *([str(row["priority"])] if prioritised else []),
            short_time(row["run_at"]),
            short_time(row["updated_at"]),
            Text(progress_text(progress) if progress else ""),
        )
    return table


def progress_text(progress: View) -> str:
    """A progress view as one line: ``42% page 42 of 100``."""
    percent = f"{progress['fraction'] * 100:.0f}%"
    message = progress.get("message")
    return f"{percent} {message}" if message else percent


def split_traceback(failure: Any) -> tuple[Any, str | None]:
    """A stored failure without its ``meta["traceback"]``, and that traceback (shown
    as text: escaped inside one-line JSON it cannot be read)."""
    if not isinstance(failure, dict):
        return failure, None
    meta = failure.get("meta")
    if not isinstance(meta, dict) or not isinstance(meta.get("traceback"), str):
        return failure, None
    rest = {key: value for key, value in meta.items() if key != "traceback"}
    return {**failure, "meta": rest}, meta["traceback"]


def run_detail(view: View) -> RenderableType:
    """One run, field by field (a view from :func:`runlane.operator.run_view`), and the
    traceback of its last failed attempt below."""
    table = Table(show_header=False, box=None, padding=(0, 2, 0, 0))
    table.add_column(style="bold", no_wrap=True)
    table.add_column(overflow="fold")
    trace: str | None = None
    for name, value in view.items():
        if name == "failure":
            value, trace = split_traceback(value)
        if name == "status":
            table.add_row(name, status_text(value))
        elif name == "progress" and isinstance(value, dict):
            line = Text(f"{progress_text(value)} (attempt {value['attempt']}, ")
            line.append(f"{short_time(value['updated_at'])})")
            if value.get("data") is not None:
                line.append("\n" + compact_json(value["data"]))
            table.add_row(name, line)
        elif isinstance(value, dict | list):
            table.add_row(name, Text(compact_json(value)))  # stored data, never markup
        else:
            table.add_row(name, Text("-" if value is None else str(value)))
    if trace is None:
        return table
    return Group(table, Text("traceback", style="bold"), Text(trace.rstrip(), style="red"))


def events_table(events: Iterable[View], *, title: str | None = None) -> Table:
    """A run's history, oldest first."""
    table = Table(title=title, title_justify="left")
    table.add_column("#", justify="right")
    table.add_column("event", no_wrap=True)
    table.add_column("at (UTC)", no_wrap=True)
    table.add_column("data", overflow="fold")
    for event in events:
        data = event["data"]
        cell = Text(compact_json(data) if data else "")
        if isinstance(data, dict) and "failure" in data:
            failure, trace = split_traceback(data["failure"])
            if trace is not None:
                cell = Text(compact_json({**data, "failure": failure}))
                cell.append("\n" + trace.rstrip(), style="red")
        table.add_row(str(event["sequence"]), event["type"], short_time(event["occurred_at"]), cell)
    return table


def _queue_cell(view: View) -> str:
    """The queue's name, with its pause and its rate limit (runs waiting for tokens and
    the next token's time) when it has them."""
    cell = str(view["queue"])
    if view.get("paused"):
        cell += " (paused)"
    if view.get("rate_limit"):
        cell += f"\nrate {view['rate_limit']}"
        if view.get("rate_limited"):
            cell += f", {view['rate_limited']} waiting for tokens"
        if view.get("next_token_at"):
            cell += f", next token {short_time(view['next_token_at'])}"
        for waiting in view.get("limited_keys") or ():
            key = waiting["key"] or "(none)"
            cell += f"\n  key {key}: next {short_time(waiting['next_token_at'])}"
    return cell


def queues_table(stats: Iterable[View]) -> Table:
    """Capacity and counts per queue (and per concurrency key), one column per status."""
    table = Table(title="queues", title_justify="left")
    table.add_column("queue", no_wrap=True)
    table.add_column("key")
    table.add_column("limit", justify="right")
    table.add_column("occupied", justify="right")
    table.add_column("waiting", justify="right")
    table.add_column("due", justify="right")
    table.add_column("oldest due (UTC)", no_wrap=True)
    table.add_column("running", justify="right")
    # "running" above already counts every leased run; the status columns follow.
    # WAITING (runs waiting for other runs) only when a queue has some: the table is
    # wide enough already.
    stats = list(stats)
    shown_waiting = any(view["counts"].get(RunStatus.WAITING.value) for view in stats)
    statuses = [
        status
        for status in RunStatus
        if status is not RunStatus.RUNNING and (status is not RunStatus.WAITING or shown_waiting)
    ]
    for status in statuses:
        table.add_column(
            STATUS_LABELS.get(status, status.value), justify="right", style=STATUS_STYLES[status]
        )
    for view in stats:
        limit = view["concurrency_limit"]
        table.add_row(
            _queue_cell(view),
            view["concurrency_key"] or "-",
            "-" if limit is None else str(limit),
            str(view["occupied"]),
            str(view["waiting"]),
            str(view["due"]),
            short_time(view["oldest_due_at"]),
            str(view["running"]),
            *(str(view["counts"][status.value]) for status in statuses),
        )
    return table
