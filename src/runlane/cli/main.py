"""The ``runlane`` command: ``runlane --help`` lists what it can do."""

from __future__ import annotations

import logging
import sys
from typing import Any

import click
from rich.logging import RichHandler

from runlane import RunlaneError, __version__
from runlane.cli.dashboard import dashboard
from runlane.cli.demo import demo
from runlane.cli.groups import groups
from runlane.cli.maintenance import migrate, tick
from runlane.cli.output import (
    cli_logger,
    console,
    json_logs_enabled,
    print_error,
    print_error_json,
    use_json_logs,
)
from runlane.cli.params import JSON_REQUESTED
from runlane.cli.queues import queues
from runlane.cli.runs import runs
from runlane.cli.schedules import schedules
from runlane.cli.topics import dead_letters, publish, subscriptions
from runlane.cli.trigger import trigger
from runlane.cli.worker import worker
from runlane.logs import JsonFormatter

#: Exit status of a command that failed with a RunlaneError (usage errors exit 2).
ERROR_EXIT_CODE = 1


class RunlaneGroup(click.Group):
    """Turns a :class:`RunlaneError` from any command into exit status 1 and one red
    ``error[<code>]: <message>`` line on stderr (one JSON record there under
    ``--log-format json``, as are usage errors); under a command's ``--json`` the error
    is also one JSON object on stdout."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        """Refuse an argument that is not valid UTF-8 before any command sees it."""
        for position, arg in enumerate(args, start=1):
            try:
                arg.encode()
            except UnicodeEncodeError:
                shown = arg.encode(errors="backslashreplace").decode()
                raise click.UsageError(
                    f"argument {position} ({shown}) is not valid UTF-8; "
                    "pass text in UTF-8 (check the terminal's or script's encoding).",
                    ctx,
                ) from None
        return super().parse_args(ctx, args)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except RunlaneError as error:
            # The error line always goes to stderr; a --json reader also gets the error
            # as an object on stdout, where it reads the command's data.
            if ctx.meta.get(JSON_REQUESTED):
                print_error_json(error)
            print_error(error)
            ctx.exit(ERROR_EXIT_CODE)
        except click.ClickException as error:
            if not json_logs_enabled():
                raise
            cli_logger.error(
                error.format_message(),
                extra={"event": "cli.usage_error", "exit_code": error.exit_code},
            )
            ctx.exit(error.exit_code)


@click.group(cls=RunlaneGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="runlane")
@click.option(
    "--log-level",
    default="warning",
    show_default=True,
    type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False),
    help="Runtime log messages at or above this level go to stderr.",
)
@click.option(
    "--log-format",
    default="text",
    show_default=True,
    type=click.Choice(["text", "json"], case_sensitive=False),
    help="json: every stderr line is one JSON object (log records, notices and errors).",
)
def cli(log_level: str, log_format: str) -> None:
    """Runlane: durable background tasks whose truth lives in your database.

    Commands that work on your app take APP, the import path of your Runlane
    runtime (module:attribute, e.g. myapp.jobs:rl), as their first argument,
    or read it from $RUNLANE_APP. Add --json for machine-readable output.
    """
    level = getattr(logging, log_level.upper())
    if log_format.lower() == "json":
        handler: logging.Handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(JsonFormatter())
        use_json_logs(True)
        # Notices are INFO records of runlane.cli: shown unless a higher level is asked.
        cli_logger.setLevel(min(level, logging.INFO))
    else:
        handler = RichHandler(console=console(stderr=True), show_path=False)
        handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
        use_json_logs(False)
    logging.basicConfig(level=level, handlers=[handler])


cli.add_command(worker)
cli.add_command(tick)
cli.add_command(migrate)
cli.add_command(trigger)
cli.add_command(runs)
cli.add_command(groups)
cli.add_command(queues)
cli.add_command(schedules)
cli.add_command(publish)
cli.add_command(dead_letters)
cli.add_command(subscriptions)
cli.add_command(dashboard)
cli.add_command(demo)


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="runlane")


if __name__ == "__main__":
    main()
