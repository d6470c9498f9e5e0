"""The APP argument every runtime command takes, and running a command against the app.

APP is the first positional argument: an import path ``module:attribute``
naming a :class:`~runlane.Runlane` (or a function returning one). When it is
left out, ``$RUNLANE_APP`` supplies it, so ``RUNLANE_APP=myapp.jobs:rl runlane
runs show RUN_ID`` and ``runlane runs show myapp.jobs:rl RUN_ID`` are the same.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import click

from runlane import Runlane
from runlane.operator import APP_ENV_VAR, load_runtime

T = TypeVar("T")

APP_HELP = (
    f"APP is the import path of your runtime, module:attribute (for example "
    f"myapp.jobs:rl); when it is omitted, ${APP_ENV_VAR} is used."
)


class AppCommand(click.Command):
    """A command whose first argument is APP, filled from ``$RUNLANE_APP`` when omitted."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("epilog", APP_HELP)
        super().__init__(*args, **kwargs)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        from_env = os.environ.get(APP_ENV_VAR)
        if from_env and not ctx.resilient_parsing and self._lacks_one_argument(ctx, args):
            args = [from_env, *args]
        return super().parse_args(ctx, args)

    def _lacks_one_argument(self, ctx: click.Context, args: list[str]) -> bool:
        # A dry parse tells how many positional values were given: if the last
        # declared argument got none, APP was left out.
        arguments = [p for p in self.get_params(ctx) if isinstance(p, click.Argument)]
        if not arguments:
            return False
        try:
            values, _, _ = self.make_parser(ctx).parse_args(args=list(args))
        except click.UsageError:
            return False
        return not isinstance(values.get(arguments[-1].name), str)


def app_argument(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Declare APP (use with ``cls=AppCommand``)."""
    return click.argument("app", metavar="APP")(fn)


def with_runtime(
    app: str, action: Callable[[Runlane], Awaitable[T]], *, open_first: bool = True
) -> T:
    """Load APP, open its runtime, run ``action`` on an event loop, and close it again.

    ``open_first=False`` hands over the runtime unopened (``migrate`` must run
    before a PostgreSQL lane will open).
    """
    runtime = load_runtime(app)

    async def run() -> T:
        try:
            if open_first:
                await runtime.open()
            return await action(runtime)
        finally:
            await runtime.close()

    return asyncio.run(run())
