"""The helpers users call in their own tests: assert_triggered, all_triggered, drain, on_lane.

These tests use the plugin's own ``runlane_factory`` and ``runlane_clock`` fixtures,
as a user's tests would.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from runlane import (
    Context,
    ErrorCode,
    ManualClock,
    RetryPolicy,
    Runlane,
    RunlaneError,
    RunStatus,
    queue,
    sqlite_lane,
    task,
)
from runlane.testing import all_triggered, assert_triggered, drain, on_lane
from runlane.testing import sync as blocking
from runlane.testing.plugin import RuntimeFactory, close_runtime

emails = queue("emails", default=True)
billing = queue("billing")


class Welcome(BaseModel):
    to: str
    tags: list[str] = []


@task("emails.welcome", schema=Welcome)
async def send_welcome(payload: Welcome, ctx: Context) -> dict[str, str]:
    return {"sent_to": payload.to}


@task("billing.charge", queue=billing, retry=RetryPolicy(max_attempts=3, initial_delay="10s"))
def charge(payload: dict[str, Any], ctx: Context) -> str:
    if ctx.attempt < 3:
        raise RuntimeError("card network timeout")
    return "charged"


@task("billing.wait_for_ledger", queue=billing)
def wait_for_ledger(payload: Any, ctx: Context) -> Any:
    if ctx.attempt == 1:
        return ctx.release("30s", reason="ledger not closed yet")
    return "synced"


@pytest.fixture
def rl(runlane_factory: RuntimeFactory) -> Runlane:
    return runlane_factory(queues=[emails, billing], tasks=[send_welcome, charge, wait_for_ledger])


async def test_assert_triggered_matches_a_payload_by_the_keys_it_names(rl: Runlane) -> None:
    run = await rl.trigger(send_welcome, {"to": "ada@example.com", "tags": ["new"]})
    await rl.trigger(send_welcome, {"to": "bo@example.com"})

    found = await assert_triggered(rl, send_welcome, payload={"to": "ada@example.com"})

    assert [r.id for r in found] == [run.id]


async def test_a_payload_matches_as_a_model_a_nested_subset_or_a_tuple(rl: Runlane) -> None:
    await rl.trigger(send_welcome, {"to": "ada@example.com", "tags": ["new", "vip"]})

    await assert_triggered(
        rl, send_welcome, payload=Welcome(to="ada@example.com", tags=["new", "vip"])
    )
    await assert_triggered(rl, "emails.welcome", payload={"tags": ("new", "vip")})
    await assert_triggered(rl, send_welcome, payload={"tags": ["new"]}, count=0)


async def test_count_asks_for_exactly_that_many_and_zero_for_none(rl: Runlane) -> None:
    await rl.trigger_many(send_welcome, [{"to": "a@example.com"}, {"to": "a@example.com"}])

    assert len(await assert_triggered(rl, send_welcome, count=2)) == 2
    await assert_triggered(rl, charge, count=0)
    with pytest.raises(AssertionError, match=r"expected 1 run of task 'emails\.welcome'"):
        await assert_triggered(rl, send_welcome, count=1)


async def test_a_failed_assertion_says_what_was_wanted_and_lists_the_runs_that_exist(
    rl: Runlane,
) -> None:
    other = await rl.trigger(send_welcome, {"to": "bo@example.com"})

    with pytest.raises(AssertionError) as caught:
        await assert_triggered(rl, send_welcome, payload={"to": "ada@example.com"}, queue=emails)

    assert str(caught.value) == (
        "expected at least one run of task 'emails.welcome' with payload matching "
        "{'to': 'ada@example.com'} and queue='emails', found 0.\n"
        "Runs of 'emails.welcome' in this environment (1):\n"
        f"  {other.id}  queued  queue=emails  payload={{'to': 'bo@example.com', 'tags': []}}"
    )


async def test_a_failed_assertion_on_a_task_never_triggered_says_so(rl: Runlane) -> None:
    with pytest.raises(AssertionError, match=r"No run of 'billing\.charge' exists"):
        await assert_triggered(rl, charge)


async def test_filters_name_run_fields_and_take_queue_definitions(
    rl: Runlane, runlane_clock: ManualClock
) -> None:
    later = await rl.trigger(charge, {"invoice": 7}, delay="1h", idempotency_key="invoice-7")

    await assert_triggered(
        rl,
        charge,
        queue=billing,
        status=RunStatus.SCHEDULED,
        idempotency_key="invoice-7",
        run_at=runlane_clock.now() + timedelta(hours=1),
    )
    assert await all_triggered(rl, charge, status="queued") == []
    assert [r.id for r in await all_triggered(rl, queue="billing")] == [later.id]


async def test_unknown_filters_and_tasks_are_typed_errors(rl: Runlane) -> None:
    with pytest.raises(RunlaneError) as caught:
        await assert_triggered(rl, send_welcome, queue_name="emails")
    assert caught.value.code is ErrorCode.CONFIGURATION_INVALID
    assert "queue_name" in caught.value.message and "'queue'" in caught.value.message

    with pytest.raises(RunlaneError) as unknown:
        await assert_triggered(rl, "emails.welcom")
    assert unknown.value.code is ErrorCode.TASK_NOT_FOUND

    with pytest.raises(RunlaneError, match="count must be"):
        await assert_triggered(rl, send_welcome, count=-1)


async def test_all_triggered_lists_every_task_oldest_first(rl: Runlane) -> None:
    first = await rl.trigger(send_welcome, {"to": "a@example.com"})
    second = await rl.trigger(charge, {"invoice": 1})
    third = await rl.trigger(send_welcome, {"to": "b@example.com"})

    assert [r.id for r in await all_triggered(rl)] == [first.id, second.id, third.id]
    assert [r.id for r in await all_triggered(rl, send_welcome)] == [first.id, third.id]


async def test_drain_executes_due_runs_and_leaves_future_ones_waiting(rl: Runlane) -> None:
    now = await rl.trigger(send_welcome, {"to": "a@example.com"})
    later = await rl.trigger(send_welcome, {"to": "b@example.com"}, delay="10m")

    executed = await drain(rl)

    assert [(r.id, r.status) for r in executed] == [(now.id, RunStatus.SUCCEEDED)]
    assert (await rl.runs.get(later.id)).status is RunStatus.SCHEDULED


async def test_drain_advances_the_clock_through_delays_retries_and_releases(
    rl: Runlane, runlane_clock: ManualClock
) -> None:
    start = runlane_clock.now()
    delayed = await rl.trigger(send_welcome, {"to": "a@example.com"}, delay="10m")
    charged = await rl.trigger(charge, {"invoice": 1})
    synced = await rl.trigger(wait_for_ledger, None)

    executed = await drain(rl, advance="1h")

    final = {r.id: r for r in executed}
    assert final[delayed.id].status is RunStatus.SUCCEEDED
    assert final[charged.id].status is RunStatus.SUCCEEDED and final[charged.id].attempt == 3
    assert final[synced.id].result == "synced"
    assert [r.id for r in executed].count(charged.id) == 3  # one entry per attempt
    assert runlane_clock.now() == start + timedelta(minutes=10)  # the latest jump it made


async def test_drain_does_not_move_the_clock_past_its_bound(
    rl: Runlane, runlane_clock: ManualClock
) -> None:
    start = runlane_clock.now()
    soon = await rl.trigger(send_welcome, {"to": "a@example.com"}, delay="5m")
    tomorrow = await rl.trigger(send_welcome, {"to": "b@example.com"}, delay="1d")

    executed = await drain(rl, advance="1h")

    assert [r.id for r in executed] == [soon.id]
    assert runlane_clock.now() == start + timedelta(minutes=5)
    assert (await rl.runs.get(tomorrow.id)).status is RunStatus.SCHEDULED


async def test_drain_only_moves_a_manual_clock(tmp_path: Path) -> None:
    async with Runlane(
        lane=sqlite_lane(tmp_path / "wall.db"), queues=[emails], tasks=[send_welcome]
    ) as rl:
        with pytest.raises(RunlaneError) as caught:
            await drain(rl, advance="1h")
    assert caught.value.code is ErrorCode.CONFIGURATION_INVALID
    assert "ManualClock" in caught.value.message


async def test_on_lane_swaps_lane_and_clock_and_puts_them_back(tmp_path: Path) -> None:
    app = Runlane(lane=sqlite_lane(tmp_path / "app.db"), queues=[emails], tasks=[send_welcome])
    original_storage, original_clock = app.storage, app.clock
    clock = ManualClock()

    with on_lane(app, sqlite_lane(tmp_path / "test.db"), clock=clock) as rl:
        assert rl is app and rl.clock is clock
        run = await rl.trigger(send_welcome, {"to": "a@example.com"})
        assert run.created_at == clock.now()
        await rl.close()

    assert app.storage is original_storage and app.clock is original_clock
    assert not (tmp_path / "app.db").exists()
    assert (tmp_path / "test.db").exists()


async def test_on_lane_refuses_a_runtime_that_is_connected(tmp_path: Path) -> None:
    async with Runlane(
        lane=sqlite_lane(tmp_path / "app.db"), queues=[emails], tasks=[send_welcome]
    ) as app:
        with pytest.raises(RunlaneError) as caught, on_lane(app, sqlite_lane(tmp_path / "t.db")):
            pass
        assert caught.value.code is ErrorCode.CONFIGURATION_INVALID
        assert app.storage.path == str(tmp_path / "app.db")  # type: ignore[attr-defined]


def test_the_blocking_twins_work_in_a_sync_test(rl: Runlane) -> None:
    run = rl.sync.trigger(charge, {"invoice": 9})

    assert [r.id for r in blocking.assert_triggered(rl, charge, payload={"invoice": 9})] == [run.id]
    settled = blocking.drain(rl, advance="1m")
    assert settled[-1].status is RunStatus.SUCCEEDED
    assert blocking.all_triggered(rl, charge, status="succeeded")[0].id == run.id


async def test_bad_arguments_to_drain_and_on_lane_are_typed_errors(rl: Runlane) -> None:
    with pytest.raises(RunlaneError, match="limit") as bad_limit:
        await drain(rl, limit=0)
    with pytest.raises(RunlaneError, match="advance") as bad_advance:
        await drain(rl, advance="soon")
    with (
        pytest.raises(RunlaneError, match="on_lane needs a lane") as bad_lane,
        on_lane(rl, "sqlite:///test.db"),  # type: ignore[arg-type]
    ):
        pass
    codes = {e.value.code for e in (bad_limit, bad_advance, bad_lane)}
    assert codes == {ErrorCode.CONFIGURATION_INVALID}


async def test_runtimes_from_one_factory_share_one_database(
    runlane_factory: RuntimeFactory,
) -> None:
    producer = runlane_factory(queues=[emails], tasks=[send_welcome])
    consumer = runlane_factory(queues=[emails], tasks=[send_welcome])

    run = await producer.trigger(send_welcome, {"to": "a@example.com"})

    assert [r.id for r in await drain(consumer)] == [run.id]


def test_close_runtime_closes_a_runtime_opened_through_rl_sync(tmp_path: Path) -> None:
    rl = Runlane(lane=sqlite_lane(tmp_path / "s.db"), queues=[emails], tasks=[send_welcome])
    rl.sync.trigger(send_welcome, {"to": "a@example.com"})
    assert rl.is_open

    close_runtime(rl)

    assert not rl.is_open


def test_close_runtime_closes_a_runtime_opened_on_an_event_loop_that_has_ended(
    tmp_path: Path,
) -> None:
    rl = Runlane(lane=sqlite_lane(tmp_path / "a.db"), queues=[emails], tasks=[send_welcome])
    asyncio.run(rl.open())
    assert rl.is_open

    close_runtime(rl)

    assert not rl.is_open
