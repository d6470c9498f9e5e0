"""Values keep their types on every lane and every path: float results however large
(``jsonb`` keeps a number as written, so PostgreSQL is where they could turn into
integers), and the payload a handler gets from ``run_now`` as from a worker."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from typing import Any

import pytest
from pydantic import BaseModel
from tests.conftest import LaneFactory

from runlane import Context, Runlane, RunStatus, queue, task

MAIN = queue("main", default=True)
FLOATS = {"ten_to_16": 1e16, "big": 1.5e20, "largest": sys.float_info.max, "negative": -1e16}


@task("results.floats")
async def floats(payload: Any, ctx: Context) -> dict[str, Any]:
    """Returns large whole floats, in a dict and in a list."""
    return {**FLOATS, "listed": list(FLOATS.values())}


class Loose(BaseModel):
    """A model with a field that takes any value as it is."""

    value: object


received: list[Any] = []


@task("results.loose", schema=Loose)
async def loose(payload: Loose, ctx: Context) -> None:
    """Records what the handler was given."""
    received.append(payload.value)


@pytest.fixture
async def rl(lane_factory: LaneFactory, environment: str) -> AsyncIterator[Runlane]:
    runtime = Runlane(
        lane=lane_factory(), queues=[MAIN], tasks=[floats, loose], environment=environment
    )
    await runtime.migrate()
    async with runtime:
        yield runtime


async def test_large_float_results_read_back_as_floats(rl: Runlane) -> None:
    ran = await rl.run_now(floats, None)
    await rl.trigger(floats, None)
    executed = await rl.execute_next()
    assert executed is not None
    for run_id in (ran.id, executed.id):
        stored = (await rl.runs.get(run_id)).result
        assert stored == {**FLOATS, "listed": list(FLOATS.values())}
        values = [*(stored[name] for name in FLOATS), *stored["listed"]]
        assert all(type(value) is float for value in values), stored


async def test_run_now_hands_the_handler_the_payload_a_worker_would(rl: Runlane) -> None:
    received.clear()
    await rl.run_now(loose, Loose(value={1: "a"}))
    await rl.trigger(loose, Loose(value={1: "a"}))
    executed = await rl.execute_next()
    assert executed is not None and executed.status is RunStatus.SUCCEEDED
    # Both re-validated from the stored JSON, whose object keys are strings.
    assert received == [{"1": "a"}, {"1": "a"}]
