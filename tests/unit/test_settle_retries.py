"""Settles are written again while storage is briefly unavailable (a restart, a failover).

Each settle is a compare-and-set on its attempt's fencing token, so writing it twice is
harmless; giving up at once would leave the run to lease expiry and run it a second time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from runlane import Context, ErrorCode, Runlane, RunlaneError, RunStatus, queue, sqlite_lane, task


def _app(tmp_path: Path, ran: list[str]) -> Runlane:
    @task("settle.noop")
    async def noop(payload: Any, ctx: Context) -> None:
        ran.append(ctx.run_id)

    return Runlane(
        lane=sqlite_lane(f"{tmp_path}/settles.db"),
        queues=[queue("main", default=True)],
        tasks=[noop],
    )


def _failing(rl: Runlane, errors: list[RunlaneError]) -> list[int]:
    """Make ``apply_transitions`` raise ``errors`` one by one, then work; count calls."""
    real = rl.storage.apply_transitions
    calls = [0]

    async def apply_transitions(*args: Any, **kwargs: Any) -> list[bool]:
        calls[0] += 1
        if errors:
            raise errors.pop(0)
        return await real(*args, **kwargs)

    rl.storage.apply_transitions = apply_transitions  # type: ignore[method-assign]
    return calls


async def test_a_settle_gets_through_once_storage_is_back(tmp_path: Path) -> None:
    ran: list[str] = []
    rl = _app(tmp_path, ran)
    async with rl:
        run = await rl.trigger("settle.noop", None)
        down = RunlaneError(ErrorCode.STORAGE_UNAVAILABLE, "server restarting", retryable=True)
        calls = _failing(rl, [down, down])
        settled = await rl.execute_next()
        assert settled is not None and settled.id == run.id
        assert settled.status is RunStatus.SUCCEEDED
        assert (await rl.runs.get(run.id)).status is RunStatus.SUCCEEDED
        assert ran == [run.id] and calls[0] == 3


@pytest.mark.parametrize(
    "error",
    [
        RunlaneError(ErrorCode.STORAGE_CONFLICT, "not a matter of waiting"),
        RunlaneError(ErrorCode.STORAGE_UNAVAILABLE, "storage is not open", meta={"open": False}),
    ],
    ids=["another-error", "closed-storage"],
)
async def test_other_errors_and_closed_storage_are_not_waited_out(
    tmp_path: Path, error: RunlaneError
) -> None:
    ran: list[str] = []
    rl = _app(tmp_path, ran)
    async with rl:
        run = await rl.trigger("settle.noop", None)
        calls = _failing(rl, [error])
        with pytest.raises(RunlaneError) as caught:
            await rl.execute_next()
        assert caught.value is error and calls[0] == 1
        assert (await rl.runs.get(run.id)).status is RunStatus.RUNNING
