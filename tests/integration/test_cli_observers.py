"""The CLI's observers on a real runtime: the drain progress bar counts finished runs."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from rich.console import Console

from runlane import Context, RetryPolicy, Runlane, WorkerMode, queue, sqlite_lane, task
from runlane.cli.observe import drain_progress


@task("bar.ok")
async def ok(payload: Any, ctx: Context) -> None:
    return None


@task("bar.retries", retry=RetryPolicy(max_attempts=2, initial_delay="1ms", max_delay="1ms"))
async def retries(payload: Any, ctx: Context) -> None:
    raise RuntimeError("once more")


async def test_the_drain_bar_advances_once_per_finished_run_not_per_attempt(
    tmp_path: Path,
) -> None:
    out = io.StringIO()
    screen = Console(file=out, force_terminal=True, width=100)
    rl = Runlane(
        lane=sqlite_lane(tmp_path / "bar.db"),
        queues=[queue("main", default=True)],
        tasks=[ok, retries],
    )
    await rl.migrate()
    async with rl:
        await rl.trigger_many(ok, [1, 2, 3])
        await rl.trigger(retries, None)
        with drain_progress(rl, total=4, out=screen):
            for _ in range(20):  # the retry comes due a moment later
                await rl.worker(mode=WorkerMode.DRAIN, handle_signals=False).run()
                if (await rl.runs.list(statuses=["retrying"])).data == []:
                    break
    # Five attempts, four finished runs: the bar ends at 4/4.
    assert "4/4" in out.getvalue()
    assert "5/4" not in out.getvalue() and "5/5" not in out.getvalue()
