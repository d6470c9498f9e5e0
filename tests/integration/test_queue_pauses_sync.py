"""``rl.sync.queues``: the blocking twin pauses, resumes and lists queues, and stays
the mapping of registered queues."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from runlane import Context, Runlane, queue, sqlite_lane, task

main = queue("main", default=True)
other = queue("other")


@task("noop")
async def noop(payload: Any, ctx: Context) -> None:
    return None


def test_the_blocking_facade_pauses_lists_and_resumes_queues(tmp_path: Path) -> None:
    rl = Runlane(lane=sqlite_lane(tmp_path / "sync.db"), queues=[main, other], tasks=[noop])
    try:
        paused = rl.sync.queues.pause("other", reason="maintenance window")
        listed = {info.name: info.paused for info in rl.sync.queues.list()}
        rl.sync.queues.resume("other")
        after = {info.name: info.paused for info in rl.sync.queues.list()}
        mapping = (
            "other" in rl.sync.queues,
            rl.sync.queues["main"] is main,
            list(rl.sync.queues),
            len(rl.sync.queues),
        )
    finally:
        rl.sync.close()
    assert (paused.name, paused.paused, paused.paused_reason) == (
        "other",
        True,
        "maintenance window",
    )
    assert listed == {"main": False, "other": True}
    assert after == {"main": False, "other": False}
    assert mapping == (True, True, ["main", "other"], 2)
