"""Running the ``runlane`` command as a real subprocess, in a folder holding a small app."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import Any

#: Generous: a subprocess pays for interpreter start-up and imports on a loaded CI box.
COMMAND_TIMEOUT = 120

#: A small app, written next to where the command runs, as users lay theirs out.
APP_MODULE = textwrap.dedent(
    """
    from runlane import RetryPolicy, Runlane, queue, schedule, sqlite_lane, task

    main = queue("main", default=True)
    reports = queue("reports")


    @task("greet")
    async def greet(payload, ctx):
        return {"greeting": f"hello {payload['name']}"}


    @task("explode", retry=RetryPolicy(max_attempts=1))
    def explode(payload, ctx):
        raise ValueError("boom")


    @task(
        "reports.render",
        queue=reports,
        schedules=[schedule("reports.nightly", cron="0 3 * * *", timezone="Europe/Berlin")],
    )
    def render(payload, ctx):
        return {"pages": 3}


    rl = Runlane(lane=sqlite_lane("app.db"), queues=[main, reports], tasks=[greet, explode, render])


    def build():
        return rl


    not_a_runtime = 42
    """
)


def runlane_command(*args: str) -> list[str]:
    """The argv that runs the CLI with this interpreter."""
    return [sys.executable, "-m", "runlane.cli.main", *args]


#: Variables a command under test never inherits.
_DROPPED = frozenset({"RUNLANE_APP", "COLUMNS", "LINES"})


def clean_environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The test's environment without a stray RUNLANE_APP, plus ``extra``.

    COLUMNS and LINES go too: a parallel test worker has them set to a terminal's 80
    columns, and the CLI sizes its tables to them; a command whose output is piped
    otherwise prints them whole, as these tests read them.
    """
    env = {k: v for k, v in os.environ.items() if k not in _DROPPED}
    env.update(extra or {})
    return env


class Cli:
    """Runs ``runlane`` in the app's folder."""

    def __init__(self, cwd: Path) -> None:
        self.cwd = cwd

    def run(
        self, *args: str, env: Mapping[str, str] | None = None, expect: int | None = 0
    ) -> subprocess.CompletedProcess[str]:
        """Run and (unless ``expect`` is None) assert the exit status."""
        done = subprocess.run(
            runlane_command(*args),
            cwd=self.cwd,
            env=clean_environment(env),
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT,
            check=False,
        )
        if expect is not None:
            assert done.returncode == expect, (
                f"runlane {' '.join(args)} exited {done.returncode}, wanted {expect}\n"
                f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
            )
        return done

    def json(self, *args: str, env: Mapping[str, str] | None = None) -> Any:
        """Run with ``--json`` and parse stdout."""
        return json.loads(self.run(*args, "--json", env=env).stdout)

    def popen(self, *args: str) -> subprocess.Popen[str]:
        """Start a long-running command (worker, tick --every)."""
        return subprocess.Popen(
            runlane_command(*args),
            cwd=self.cwd,
            env=clean_environment(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
