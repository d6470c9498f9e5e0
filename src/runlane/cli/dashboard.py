"""``runlane dashboard``: serve the web dashboard of an app until SIGINT/SIGTERM."""

from __future__ import annotations

import asyncio
import ipaddress
import os
import socket

import click

from runlane import ErrorCode, RunlaneError
from runlane.cli.app import AppCommand, app_argument
from runlane.cli.output import print_notice
from runlane.cli.params import duration
from runlane.operator import load_runtime

#: The environment variable holding the operator token unless ``--token-env`` names another.
TOKEN_ENV_VAR = "RUNLANE_DASHBOARD_TOKEN"
DEFAULT_PORT = 8765


@click.command(cls=AppCommand)
@app_argument
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to listen on.")
@click.option(
    "--port",
    default=DEFAULT_PORT,
    show_default=True,
    type=click.IntRange(0, 65535),
    help="Port to listen on; 0 picks a free one (the start line names it).",
)
@click.option(
    "--token-env",
    metavar="NAME",
    help=f"Read the operator token from this environment variable (default: {TOKEN_ENV_VAR}). "
    "Without a token the dashboard is read-only.",
)
@click.option(
    "--token",
    help="The operator token itself. Prefer --token-env: the command line is visible in ps.",
)
@click.option("--root-path", default="", help="Serve everything under this prefix, e.g. /runlane.")
@click.option(
    "--refresh",
    type=duration,
    default="5s",
    show_default=True,
    help="How often open pages refresh their tables (0 turns it off).",
)
@click.option("--hide-payloads", is_flag=True, help="Show payloads and results as (hidden).")
def dashboard(
    app: str,
    host: str,
    port: int,
    token_env: str | None,
    token: str | None,
    root_path: str,
    refresh: float,
    hide_payloads: bool,
) -> None:
    """Serve the web dashboard: queues, runs, schedules, /api and /metrics."""
    # Imported here: the dashboard needs the extra, and names the install line if it is missing.
    from runlane.dashboard import create_app
    from runlane.dashboard.serving import serve

    operator_token = token or _token_from_env(token_env)
    rl = load_runtime(app)
    web = create_app(
        rl,
        token=operator_token,
        root_path=root_path.rstrip("/"),
        hide_payloads=hide_payloads,
        refresh=refresh,
    )
    listener = _listen(host, port)
    bound_host, bound_port = listener.getsockname()[:2]
    shown_host = f"[{bound_host}]" if ":" in bound_host else bound_host
    mode = "read-only" if operator_token is None else "actions need the token"
    click.echo(f"dashboard: http://{shown_host}:{bound_port}{root_path.rstrip('/')}/ ({mode})")
    if operator_token is None and not _is_loopback(host):
        print_notice(
            f"warning: {host} is not a loopback address and no token is set: "
            "anyone who can reach it can read payloads and results (see --hide-payloads)."
        )

    async def run() -> None:
        await rl.open()
        try:
            await serve(web, listener)
        finally:
            await rl.close()
            listener.close()

    asyncio.run(run())


def _token_from_env(name: str | None) -> str | None:
    value = os.environ.get(name or TOKEN_ENV_VAR, "").strip()
    if name is not None and not value:
        raise RunlaneError(
            ErrorCode.CONFIGURATION_INVALID,
            f"--token-env {name}: that environment variable is unset or empty; "
            "set it to the operator token, or leave --token-env out for a read-only dashboard.",
            meta={"token_env": name},
        )
    return value or None


def _listen(host: str, port: int) -> socket.socket:
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        listener = socket.socket(family, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((host, port))
        listener.listen(128)
    except OSError as error:
        raise RunlaneError(
            ErrorCode.CONFIGURATION_INVALID,
            f"cannot listen on {host}:{port} ({error.strerror or error}); "
            "pick another --port (0 picks a free one) or --host.",
            meta={"host": host, "port": port},
        ) from None
    return listener


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
