"""``runlane dashboard`` as a real subprocess over the seeded SQLite app in a folder."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from tests.e2e.runner import clean_environment, runlane_command
from tests.support.dashboard_app import Seeded, build_runtime, seed

ROOT = Path(__file__).resolve().parents[2]
#: The app the command loads: the shared test app on ``app.db`` in the working folder.
APP_MODULE = (
    'from tests.support.dashboard_app import build_runtime\n\nrl = build_runtime("app.db")\n'
)
START_TIMEOUT = 60

T = TypeVar("T")


def run_async(action: Callable[[], Awaitable[T]]) -> T:
    """Run ``action`` on an event loop of its own thread (Playwright's sync API holds one here)."""

    async def main() -> T:
        return await action()

    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, main()).result()


@dataclass
class DashboardProcess:
    """A running dashboard: its base URL and the process serving it."""

    url: str
    process: subprocess.Popen[str]
    folder: Path
    seeded: Seeded

    def stop(self) -> tuple[int, str]:
        """SIGTERM, then the exit status and everything it wrote to stderr."""
        self.process.send_signal(signal.SIGTERM)
        _, stderr = self.process.communicate(timeout=30)
        return self.process.returncode, stderr


def seed_app(folder: Path) -> Seeded:
    """Write the app module into ``folder`` and fill its database."""
    (folder / "app.py").write_text(APP_MODULE)

    async def prepare() -> Seeded:
        async with build_runtime(folder / "app.db") as rl:
            return await seed(rl)

    return run_async(prepare)


@contextmanager
def running_dashboard(
    folder: Path, *args: str, env: dict[str, str] | None = None
) -> Iterator[DashboardProcess]:
    """Start ``runlane dashboard app:rl --port 0 ARGS`` and read its start line."""
    seeded = seed_app(folder)
    environment = clean_environment(env)
    environment["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])
    )
    process = subprocess.Popen(
        runlane_command("dashboard", "app:rl", "--port", "0", *args),
        cwd=folder,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        if not line.startswith("dashboard: "):
            process.kill()
            _, stderr = process.communicate(timeout=START_TIMEOUT)
            raise AssertionError(f"dashboard did not start: {line!r} {stderr}")
        url = line.split()[1]
        yield DashboardProcess(url, process, folder, seeded)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate(timeout=30)
