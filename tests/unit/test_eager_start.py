"""On Python 3.12+ a worker starts each attempt as an eager task: a handler that never
waits has run, and freed its slot, before the call that started it returns.

The first test is the guard of the eager stage of ``./dev test``, which runs the
worker's tests again on Python 3.12+: under 3.11 it is skipped, but in the stage a skip
fails the session (the ``eager_start`` marker, tests/conftest.py), so the stage cannot
pass without the eager path.
"""

from __future__ import annotations

import asyncio
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from runlane import Context, Runlane, WorkerMode, queue, sqlite_lane, task
from runlane.core.worker_slots import WorkerSlots, _eager
from runlane.types.runs import Run

ROOT = Path(__file__).resolve().parents[2]
RUNS = 30

#: Per run id: whether the handler saw its worker's loop start attempts eagerly.
handled: dict[str, bool] = {}


@task("eager.never_waits")
async def never_waits(payload: Any, ctx: Context) -> None:
    handled[ctx.run_id] = _eager(asyncio.get_running_loop())


@pytest.mark.eager_start
@pytest.mark.skipif(sys.version_info < (3, 12), reason="eager tasks start on Python 3.12+")
async def test_each_attempt_runs_to_its_end_within_the_call_that_starts_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    handled.clear()
    # Per attempt started: (handler done, slot free) as _begin returns, before any
    # turn of the loop could have run a task scheduled the 3.11 way.
    at_return: dict[str, tuple[bool, bool]] = {}
    begin = WorkerSlots._begin

    def observed_begin(slots: WorkerSlots, run: Run, loop: asyncio.AbstractEventLoop) -> None:
        begin(slots, run, loop)
        key = (run.id, run.attempt)
        at_return[run.id] = (run.id in handled, key not in slots._holding)

    monkeypatch.setattr(WorkerSlots, "_begin", observed_begin)
    rl = Runlane(
        lane=sqlite_lane(tmp_path / "eager.db"),
        queues=[queue("main", default=True)],
        tasks=[never_waits],
        environment="eager",
    )
    await rl.migrate()
    async with rl:
        created = await rl.trigger_many(never_waits, [{} for _ in range(RUNS)])
        worker = rl.worker(concurrency=4, mode=WorkerMode.DRAIN, handle_signals=False)
        await asyncio.wait_for(worker.run(), 30)
    ids = {run.id for run in created}
    assert worker.executed == RUNS
    assert handled == dict.fromkeys(ids, True)
    assert at_return == dict.fromkeys(ids, (True, True))


def test_the_eager_stage_runs_this_guard_and_only_test_files_that_exist() -> None:
    # Checked here too, so a renamed file breaks the main stage, not only a 3.12+ one.
    script = (ROOT / "dev").read_text()
    listed = re.search(r"^EAGER_TESTS=\((.*?)^\)", script, re.DOTALL | re.MULTILINE)
    assert listed is not None, "./dev no longer lists EAGER_TESTS"
    paths = listed.group(1).split()
    assert "tests/unit/test_eager_start.py" in paths
    assert [path for path in paths if not (ROOT / path).is_file()] == []
