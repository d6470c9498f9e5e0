"""``rl.sync.runs.wait``: the blocking twin of ``rl.runs.wait`` for sync apps."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from runlane import Runlane, RunStatus, queue, sqlite_lane, task

MAIN = queue("main", default=True)


@task("sync.wait.echo")
def echo(payload: Any, ctx: Any) -> Any:
    ctx.progress_sync(1.0, message="echoed")
    return payload


def test_a_sync_app_waits_for_a_run_another_thread_executes(tmp_path: Path) -> None:
    rl = Runlane(lane=sqlite_lane(tmp_path / "sync.db"), queues=[MAIN], tasks=[echo])
    try:
        run = rl.sync.trigger(echo, {"n": 1})
        later = rl.sync.trigger(echo, None, delay="1h")
        executing = threading.Timer(0.3, rl.sync.execute_next)
        executing.start()
        finished = rl.sync.runs.wait(run.id, timeout="10s")
        executing.join()
        assert finished.status is RunStatus.SUCCEEDED and finished.result == {"n": 1}
        assert finished.progress is not None and finished.progress.message == "echoed"
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            rl.sync.runs.wait(later.id, timeout="200ms")
        assert time.monotonic() - started < 1.5
    finally:
        rl.sync.close()
