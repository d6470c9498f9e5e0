"""An idle worker on a SQLite file, for wakeup tests: ``python -m tests.support.sqlite_worker``.

The file comes from RUNLANE_APP_SQLITE and the poll interval from
RUNLANE_APP_POLL_INTERVAL; RUNLANE_APP_NO_INOTIFY=1 makes it watch commits through
``PRAGMA data_version`` as it does where inotify is missing. It prints ``ready``
once its runtime is open and its first claim is about to happen, and stops on SIGTERM.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from runlane import Context, Runlane, WorkerMode, queue, sqlite_lane, task
from runlane.storage.sqlite import listener


@task("ping")
async def ping(payload: Any, ctx: Context) -> None:
    """A no-op."""


def build_runtime(path: str) -> Runlane:
    """The runtime both the worker process and the test process build on ``path``."""
    return Runlane(lane=sqlite_lane(path), queues=[queue("main", default=True)], tasks=[ping])


async def _main() -> None:
    if os.environ.get("RUNLANE_APP_NO_INOTIFY") == "1":
        listener._libc_inotify = lambda: None
    rl = build_runtime(os.environ["RUNLANE_APP_SQLITE"])
    async with rl:
        worker = rl.worker(
            concurrency=4,
            mode=WorkerMode.POLL,
            poll_interval=os.environ.get("RUNLANE_APP_POLL_INTERVAL", "60s"),
        )
        print("ready", flush=True)
        await worker.run()


if __name__ == "__main__":
    asyncio.run(_main())
