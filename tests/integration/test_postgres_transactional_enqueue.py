"""Enqueue inside the caller's own psycopg transaction: the run exists iff it commits."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest

from runlane import Context, ErrorCode, Runlane, RunlaneError, RunStatus, postgres_lane, queue, task


@task("emails.send")
async def send_email(payload: Any, ctx: Context) -> None:
    return None


@pytest.fixture
async def rl(postgres_dsn: str, environment: str) -> AsyncIterator[Runlane]:
    runtime = Runlane(
        lane=postgres_lane(postgres_dsn),
        queues=[queue("main", default=True)],
        tasks=[send_email],
        environment=environment,
    )
    await runtime.migrate()
    async with runtime:
        yield runtime


async def _run_ids(rl: Runlane) -> list[str]:
    return [run.id for run in (await rl.runs.list()).data]


async def test_an_async_transaction_that_rolls_back_leaves_no_run(
    rl: Runlane, postgres_dsn: str
) -> None:
    async with await psycopg.AsyncConnection.connect(postgres_dsn) as conn:
        await conn.execute("SELECT 1")
        run = await rl.trigger(send_email, {"to": "a@example.com"}, connection=conn)
        assert run.status is RunStatus.QUEUED
        assert await _run_ids(rl) == []  # not visible before commit
        await conn.rollback()
    assert await _run_ids(rl) == []
    with pytest.raises(RunlaneError) as caught:
        await rl.runs.get(run.id)
    assert caught.value.code is ErrorCode.RUN_NOT_FOUND


async def test_an_async_transaction_that_commits_leaves_exactly_one_run(
    rl: Runlane, postgres_dsn: str
) -> None:
    async with await psycopg.AsyncConnection.connect(postgres_dsn) as conn:
        run = await rl.trigger(send_email, {"to": "a@example.com"}, connection=conn)
        await conn.commit()
    assert await _run_ids(rl) == [run.id]
    stored = await rl.runs.get(run.id)
    assert stored.payload == {"to": "a@example.com"} and stored.status is RunStatus.QUEUED
    assert [e.type.value for e in await rl.runs.events(run.id)] == ["run.created"]
    done = await rl.execute_next()
    assert done is not None and done.id == run.id and done.status is RunStatus.SUCCEEDED


async def test_a_sync_transaction_that_rolls_back_leaves_no_run(
    rl: Runlane, postgres_dsn: str
) -> None:
    with psycopg.connect(postgres_dsn) as conn:
        conn.execute("CREATE TEMP TABLE orders (id int)")
        conn.execute("INSERT INTO orders VALUES (1)")
        await rl.trigger(send_email, {"to": "a@example.com"}, connection=conn)
        conn.rollback()
    assert await _run_ids(rl) == []


async def test_a_sync_transaction_that_commits_leaves_exactly_one_run(
    rl: Runlane, postgres_dsn: str
) -> None:
    with psycopg.connect(postgres_dsn) as conn:
        run = await rl.trigger(send_email, {"to": "b@example.com"}, connection=conn)
        many = await rl.trigger_many(send_email, [{"to": "c@example.com"}] * 3, connection=conn)
        conn.commit()
    assert sorted(await _run_ids(rl)) == sorted([run.id, *(r.id for r in many)])


async def test_keys_inside_a_rolled_back_transaction_are_not_held(
    rl: Runlane, postgres_dsn: str
) -> None:
    with psycopg.connect(postgres_dsn) as conn:
        ghost = await rl.trigger(send_email, None, idempotency_key="k", connection=conn)
        same = await rl.trigger(send_email, None, idempotency_key="k", connection=conn)
        assert same.id == ghost.id
        conn.rollback()
    fresh = await rl.trigger(send_email, None, idempotency_key="k", singleton_key="s")
    assert fresh.id != ghost.id and await _run_ids(rl) == [fresh.id]


async def test_an_autocommit_connection_commits_the_run_by_itself(
    rl: Runlane, postgres_dsn: str
) -> None:
    async with await psycopg.AsyncConnection.connect(postgres_dsn, autocommit=True) as conn:
        run = await rl.trigger(send_email, None, idempotency_key="auto", connection=conn)
    assert await _run_ids(rl) == [run.id]


async def test_the_callers_connection_keeps_its_own_settings(
    rl: Runlane, postgres_dsn: str
) -> None:
    with psycopg.connect(postgres_dsn, row_factory=psycopg.rows.tuple_row) as conn:
        await rl.trigger(send_email, None, idempotency_key="settings", connection=conn)
        assert conn.execute("""SELECT '{"a": 1}'::jsonb""").fetchone() == ({"a": 1},)
        conn.commit()


async def test_a_failed_transaction_is_refused_and_adds_nothing(
    rl: Runlane, postgres_dsn: str
) -> None:
    with psycopg.connect(postgres_dsn) as conn:
        with pytest.raises(psycopg.errors.DivisionByZero):
            conn.execute("SELECT 1 / 0")
        with pytest.raises(RunlaneError) as caught:
            await rl.trigger(send_email, None, connection=conn)
        assert caught.value.code is ErrorCode.CONFIGURATION_INVALID
        conn.rollback()
    assert await _run_ids(rl) == []


async def test_a_rolled_back_trigger_wakes_no_worker_and_a_committed_one_does(
    rl: Runlane, postgres_dsn: str
) -> None:
    notifier: Any = rl.storage
    await notifier.wait_for_work(rl.environment, 0.05)  # start listening
    with psycopg.connect(postgres_dsn) as conn:
        await rl.trigger(send_email, None, connection=conn)
        conn.rollback()
    assert await notifier.wait_for_work(rl.environment, 0.5) is False
    with psycopg.connect(postgres_dsn) as conn:
        await rl.trigger(send_email, None, connection=conn)
        assert await notifier.wait_for_work(rl.environment, 0.3) is False
        conn.commit()
    assert await notifier.wait_for_work(rl.environment, 5) is True
