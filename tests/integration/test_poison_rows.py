"""One stored payload nobody can decode fails only its own run, on both lanes.

The public API refuses such payloads now (nesting is capped), so these tests write
the poison straight into storage, as an older version could have: a payload nested
far deeper than any Python stack can decode. Every other run must still run, and
maintenance must still recover leases.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from runlane import (
    Context,
    ErrorCode,
    Lane,
    ManualClock,
    Runlane,
    RunStatus,
    WorkerMode,
    postgres_lane,
    queue,
    sqlite_lane,
    task,
)
from runlane.ports.storage import LeaseRequest
from runlane.ports.transport import DeliveryMessage, DeliveryOutcome
from runlane.types.runs import Run

MAIN = queue("main", default=True)
BOUNDED = queue("bounded", concurrency_limit=5)
#: Valid JSON that no Python process decodes at the default recursion limit.
POISON = "[" * 5000 + "]" * 5000

Poisoner = Callable[[str], None]


@task("echo")
async def echo(payload: Any, ctx: Context) -> Any:
    return payload


@pytest.fixture
def store(
    driver: str, tmp_path: Path, request: pytest.FixtureRequest
) -> tuple[Callable[[], Lane], Callable[[str, str], None]]:
    """A lane factory and ``poison(environment, run_id)`` writing POISON as its payload."""
    if driver == "sqlite":
        path = tmp_path / "runlane.db"

        def poison_sqlite(environment: str, run_id: str) -> None:
            with sqlite3.connect(path) as conn:
                changed = conn.execute(
                    "UPDATE runlane_runs SET payload = ? WHERE environment = ? AND id = ?",
                    (POISON, environment, run_id),
                ).rowcount
            assert changed == 1

        return (lambda: sqlite_lane(path)), poison_sqlite
    dsn = request.getfixturevalue("postgres_dsn")

    def poison_postgres(environment: str, run_id: str) -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            changed = conn.execute(
                sql.SQL(
                    "UPDATE {}.runlane_runs SET payload = %s WHERE environment = %s AND id = %s"
                ).format(sql.Identifier("runlane")),
                (POISON, environment, run_id),
            ).rowcount
        assert changed == 1

    return (lambda: postgres_lane(dsn)), poison_postgres


@pytest.fixture
async def runtime(
    store: tuple[Callable[[], Lane], Callable[[str, str], None]], environment: str
) -> AsyncIterator[Callable[..., Awaitable[Runlane]]]:
    opened: list[Runlane] = []

    async def build(**options: Any) -> Runlane:
        rl = Runlane(
            lane=store[0](),
            queues=[MAIN, BOUNDED],
            tasks=[echo],
            environment=environment,
            **options,
        )
        await rl.migrate()
        await rl.open()
        opened.append(rl)
        return rl

    yield build
    for rl in opened:
        await rl.close()


async def _poisoned_among_good(
    rl: Runlane, poison: Callable[[str, str], None], *, on: Any = MAIN
) -> tuple[Run, list[Run]]:
    runs = await rl.trigger_many(echo, [{"n": n} for n in range(5)], queue=on)
    poison(rl.environment, runs[2].id)
    return runs[2], [r for i, r in enumerate(runs) if i != 2]


async def _assert_only_poison_failed(rl: Runlane, bad: Run, good: list[Run]) -> None:
    failed = await rl.runs.get(bad.id)
    assert failed.status is RunStatus.FAILED
    assert failed.failure is not None and failed.failure.code == ErrorCode.PAYLOAD_INVALID.value
    for run in good:
        done = await rl.runs.get(run.id)
        assert done.status is RunStatus.SUCCEEDED and done.result == run.payload


@pytest.mark.parametrize("on", [MAIN, BOUNDED], ids=["unbounded", "bounded"])
async def test_claims_fail_only_the_poisoned_run(
    runtime: Callable[..., Awaitable[Runlane]],
    store: tuple[Callable[[], Lane], Callable[[str, str], None]],
    on: Any,
) -> None:
    rl = await runtime()
    bad, good = await _poisoned_among_good(rl, store[1], on=on)
    while await rl.execute_next() is not None:
        pass
    await _assert_only_poison_failed(rl, bad, good)


async def test_a_worker_settling_and_claiming_fails_only_the_poisoned_run(
    runtime: Callable[..., Awaitable[Runlane]],
    store: tuple[Callable[[], Lane], Callable[[str, str], None]],
) -> None:
    rl = await runtime()
    first = await rl.trigger_many(echo, [{"n": n} for n in range(10, 15)])
    bad, good = await _poisoned_among_good(rl, store[1])
    await rl.worker(mode=WorkerMode.DRAIN, concurrency=3, handle_signals=False).run()
    await _assert_only_poison_failed(rl, bad, [*first, *good])


async def test_claiming_one_poisoned_run_by_id_fails_only_it(
    runtime: Callable[..., Awaitable[Runlane]],
    store: tuple[Callable[[], Lane], Callable[[str, str], None]],
) -> None:
    rl = await runtime()
    bad, good = await _poisoned_among_good(rl, store[1])
    for run in [bad, *good]:
        message = DeliveryMessage(run_id=run.id, environment=rl.environment, queue=run.queue)
        result = await rl.execute_delivery(message)
        assert result.outcome is DeliveryOutcome.EXECUTED
    await _assert_only_poison_failed(rl, bad, good)


async def test_tick_recovers_an_expired_lease_on_a_poisoned_run(
    runtime: Callable[..., Awaitable[Runlane]],
    store: tuple[Callable[[], Lane], Callable[[str, str], None]],
) -> None:
    clock = ManualClock()
    rl = await runtime(clock=clock)
    bad, good = await _poisoned_among_good(rl, store[1])
    # A worker claims every run and then dies without settling any.
    request = LeaseRequest("dead-worker", clock.now() + timedelta(seconds=30))
    claimed = await rl.storage.claim_due_runs(
        rl.environment, rl.registry.queue_policies, 10, request, clock.now()
    )
    assert {run.id for run in claimed} == {bad.id, *(r.id for r in good)}
    clock.advance(timedelta(minutes=5))
    report = await rl.tick()
    assert report.leases_recovered == 5
    clock.advance(timedelta(hours=1))  # past every recovered run's retry backoff
    while await rl.execute_next() is not None:
        pass
    await _assert_only_poison_failed(rl, bad, good)
