"""Finished runs on PostgreSQL are announced once per settle statement (migration 021).

The settle statement (``apply_finishing_transitions`` when one of its transitions
finishes a run) sends the notification of its environment itself, before it writes a
row, and names the environment in ``runlane.announced``; the per-row trigger of
migration 012 then skips that environment's rows until the transaction ends. These
tests listen on the channel from a plain connection and count what arrives, and count
the trigger's calls with ``track_functions``.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql

import runlane.core.waiting as waiting_module
from runlane import Context, RetryPolicy, Runlane, RunStatus, postgres_lane, queue, task
from runlane.ports.storage import QueuePolicy, Transition
from runlane.storage.postgres import PostgresStorage
from runlane.storage.postgres.queries import QUERY_TEMPLATES
from runlane.storage.postgres.transitions import settle_statement, transition_params
from runlane.testing.conformance.storage.methods import LEASE, NOW, new_run
from runlane.types.clock import to_micros
from runlane.types.records import NewEvent, RunChanges
from runlane.types.runs import Run, RunEventType

pytestmark = pytest.mark.asyncio

TERMINAL = {
    RunStatus.SUCCEEDED: RunEventType.SUCCEEDED,
    RunStatus.FAILED: RunEventType.FAILED,
    RunStatus.CANCELLED: RunEventType.CANCELLED,
}


def _channel(environment: str) -> str:
    return "runlane_finished_" + hashlib.md5(environment.encode()).hexdigest()


@pytest.fixture
async def schema(postgres_dsn: str) -> AsyncIterator[str]:
    """A migrated schema of this test's own (its trigger may be disabled), dropped after."""
    name = f"ann_{uuid.uuid4().hex[:10]}"
    storage = PostgresStorage(postgres_dsn, schema=name)
    await storage.migrate()
    yield name
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


@pytest.fixture
async def storage(postgres_dsn: str, schema: str) -> AsyncIterator[PostgresStorage]:
    opened = PostgresStorage(postgres_dsn, schema=schema)
    await opened.open()
    yield opened
    await opened.close()


@pytest.fixture
def listener(postgres_dsn: str, environment: str) -> Iterator[psycopg.Connection[Any]]:
    """A plain connection listening on the environment's channel (and on ``-other``'s)."""
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        for env in (environment, f"{environment}-other"):
            conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(_channel(env))))
        yield conn


def _heard(conn: psycopg.Connection[Any], within: float = 0.5) -> list[tuple[str, str]]:
    """The (channel, payload) of every notification that arrives within ``within`` s."""
    return [(n.channel, n.payload) for n in conn.notifies(timeout=within)]


async def _leased(storage: PostgresStorage, environment: str, *ids: str) -> list[Run]:
    await storage.create_runs(environment, [new_run(run_id) for run_id in ids], NOW)
    runs = []
    for run_id in ids:
        run = await storage.claim_run(environment, run_id, LEASE, NOW)
        assert run is not None and run.lease is not None
        runs.append(run)
    return runs


def _settle(run: Run, status: RunStatus, sequence: int | None = None) -> Transition:
    """``run``'s attempt ended with ``status`` (a retry when not terminal)."""
    assert run.lease is not None
    event = TERMINAL.get(status, RunEventType.RETRY_SCHEDULED)
    return Transition(
        run.id,
        run.event_sequence if sequence is None else sequence,
        RunChanges(status, add_failure=status is not RunStatus.SUCCEEDED),
        (NewEvent(event),),
        lease_token=run.lease.token,
    )


def _disable_trigger(dsn: str, schema: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL("ALTER TABLE {} DISABLE TRIGGER runlane_runs_finished").format(
                sql.Identifier(schema, "runlane_runs")
            )
        )


# -- the driver's statements ----------------------------------------------------------


async def test_a_batch_settle_announces_its_environment_once_without_the_trigger(
    storage: PostgresStorage, postgres_dsn: str, schema: str, environment: str,
    listener: psycopg.Connection[Any],
) -> None:  # fmt: skip
    # No trigger: what arrives, the statement sent.
    _disable_trigger(postgres_dsn, schema)
    runs = await _leased(storage, environment, *(f"r{i}" for i in range(6)))
    statuses = [RunStatus.SUCCEEDED] * 3 + [RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.FAILED]
    settles = [_settle(run, status) for run, status in zip(runs, statuses, strict=True)]
    assert await storage.apply_transitions(environment, settles, NOW) == [True] * 6
    assert _heard(listener) == [(_channel(environment), environment)]
    # The worker's settle that claims: one transaction, one notification.
    more = await _leased(storage, environment, "s1", "s2")
    await storage.create_runs(environment, [new_run("next")], NOW)
    applied, claimed = await storage.apply_transitions_and_claim(
        environment, [_settle(run, RunStatus.SUCCEEDED) for run in more], NOW,
        [QueuePolicy("main")], 1, LEASE,
    )  # fmt: skip
    assert applied == [True, True] and [run.id for run in claimed] == ["next"]
    assert _heard(listener) == [(_channel(environment), environment)]


async def test_a_claim_and_a_retry_announce_nothing(
    storage: PostgresStorage, environment: str, listener: psycopg.Connection[Any]
) -> None:
    first, second = await _leased(storage, environment, "a", "b")
    await storage.create_runs(environment, [new_run("c")], NOW)
    assert [run.id for run in await storage.claim_due_runs(
        environment, [QueuePolicy("main")], 5, LEASE, NOW
    )] == ["c"]  # fmt: skip
    retry = _settle(first, RunStatus.RETRYING)
    assert await storage.apply_transitions(environment, [retry], NOW) == [True]
    assert _heard(listener) == []
    # The settle that does finish a run is heard, once.
    both = [_settle(second, RunStatus.FAILED), _settle(first, RunStatus.RETRYING, 99)]
    assert await storage.apply_transitions(environment, both, NOW) == [True, False]
    assert _heard(listener) == [(_channel(environment), environment)]


async def test_a_finishing_settle_that_loses_its_compare_and_set_announces_once(
    storage: PostgresStorage, environment: str, listener: psycopg.Connection[Any]
) -> None:
    # The statement announces before it writes: a waiter re-reads and finds the run
    # as it was. Nothing else is heard.
    (run,) = await _leased(storage, environment, "a")
    stale = _settle(run, RunStatus.SUCCEEDED, sequence=run.event_sequence - 1)
    assert await storage.apply_transitions(environment, [stale], NOW) == [False]
    assert _heard(listener) == [(_channel(environment), environment)]


# -- in a transaction of the caller's: the statement, then other SQL --------------------


class _Caller:
    """A connection of the application's own that runs the settle statement and plain
    SQL in its transactions, counting the trigger's calls (``track_functions``)."""

    def __init__(self, dsn: str, schema: str) -> None:
        self.conn = psycopg.connect(dsn)
        self.schema = schema
        quoted = sql.Identifier(schema).as_string(self.conn)
        self.q = {name: text.replace("{schema}", quoted) for name, text in QUERY_TEMPLATES.items()}

    def begin(self) -> None:
        self.conn.execute("SET LOCAL track_functions = 'pl'")

    def settle(self, environment: str, transitions: list[Transition]) -> int:
        params = transition_params(environment, transitions, to_micros(NOW))
        statement = settle_statement(self.q, params)
        return len(self.conn.execute(statement, params).fetchall())  # type: ignore[arg-type]

    def finish(self, environment: str, run_id: str) -> None:
        """Finish a run as SQL of the application's own would."""
        self.conn.execute(
            sql.SQL("UPDATE {} SET status = 'cancelled' WHERE environment = %s AND id = %s")
            .format(sql.Identifier(self.schema, "runlane_runs")),
            (environment, run_id),
        )  # fmt: skip

    def trigger_calls(self) -> int:
        row = self.conn.execute(
            "SELECT pg_stat_get_xact_function_calls(%s::regproc)",
            (f'"{self.schema}".runlane_announce_finished',),
        ).fetchone()
        return int(row[0] or 0) if row else 0


@pytest.fixture
def caller(postgres_dsn: str, schema: str) -> Iterator[_Caller]:
    made = _Caller(postgres_dsn, schema)
    yield made
    made.conn.close()


async def test_the_trigger_skips_runs_of_an_environment_the_transaction_announced(
    storage: PostgresStorage, caller: _Caller, environment: str,
    listener: psycopg.Connection[Any],
) -> None:  # fmt: skip
    runs = await _leased(storage, environment, "a", "b", "c")
    await storage.create_runs(environment, [new_run("queued")], NOW)
    with caller.conn.transaction():
        caller.begin()
        settles = [_settle(run, RunStatus.SUCCEEDED) for run in runs[:2]]
        assert caller.settle(environment, settles) == 2
        caller.finish(environment, "queued")  # a later statement, same environment
        assert caller.trigger_calls() == 0
        assert caller.settle(environment, [_settle(runs[2], RunStatus.FAILED)]) == 1
        assert caller.trigger_calls() == 0
    assert _heard(listener) == [(_channel(environment), environment)]


async def test_a_statement_that_finishes_nothing_leaves_the_trigger_to_announce(
    storage: PostgresStorage, caller: _Caller, environment: str,
    listener: psycopg.Connection[Any],
) -> None:  # fmt: skip
    (run,) = await _leased(storage, environment, "a")
    await storage.create_runs(environment, [new_run("queued")], NOW)
    with caller.conn.transaction():
        caller.begin()
        assert caller.settle(environment, [_settle(run, RunStatus.RETRYING)]) == 1
        assert caller.trigger_calls() == 0
        caller.finish(environment, "queued")
        assert caller.trigger_calls() == 1
    assert _heard(listener) == [(_channel(environment), environment)]


async def test_an_announced_environment_does_not_silence_another(
    storage: PostgresStorage, caller: _Caller, environment: str,
    listener: psycopg.Connection[Any],
) -> None:  # fmt: skip
    other = f"{environment}-other"
    (run,) = await _leased(storage, environment, "a")
    await storage.create_runs(other, [new_run("queued")], NOW)
    with caller.conn.transaction():
        caller.begin()
        assert caller.settle(environment, [_settle(run, RunStatus.SUCCEEDED)]) == 1
        caller.finish(other, "queued")
        assert caller.trigger_calls() == 1
    assert sorted(_heard(listener)) == sorted(
        [(_channel(environment), environment), (_channel(other), other)]
    )


async def test_a_settle_rolled_back_announces_nothing_and_gives_the_trigger_back(
    storage: PostgresStorage, caller: _Caller, environment: str,
    listener: psycopg.Connection[Any],
) -> None:  # fmt: skip
    first, second = await _leased(storage, environment, "a", "b")
    await storage.create_runs(environment, [new_run("queued")], NOW)
    with pytest.raises(_Rollback), caller.conn.transaction():
        assert caller.settle(environment, [_settle(first, RunStatus.SUCCEEDED)]) == 1
        raise _Rollback
    assert _heard(listener) == []
    # Rolled back to a savepoint: the setting goes with the notification.
    with caller.conn.transaction():
        caller.begin()
        with pytest.raises(_Rollback), caller.conn.transaction():
            assert caller.settle(environment, [_settle(second, RunStatus.SUCCEEDED)]) == 1
            raise _Rollback
        caller.finish(environment, "queued")
        assert caller.trigger_calls() == 1
    assert _heard(listener) == [(_channel(environment), environment)]


class _Rollback(Exception):
    pass


# -- rl.runs.wait: every path that finishes a run wakes its waiters -------------------


@task("ok", retry=RetryPolicy(max_attempts=1))
async def ok(payload: Any, ctx: Context) -> None:
    return None


@task("boom", retry=RetryPolicy(max_attempts=1))
async def boom(payload: Any, ctx: Context) -> None:
    raise RuntimeError("boom")


@pytest.fixture
async def rl(
    postgres_dsn: str, environment: str, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Runlane]:
    # Waiters learn of a finish only by its notification: no re-read meanwhile.
    monkeypatch.setattr(waiting_module, "REREAD_INTERVAL", 60.0)
    runtime = Runlane(
        lane=postgres_lane(postgres_dsn),
        queues=[queue("main", default=True)],
        tasks=[ok, boom],
        environment=environment,
    )
    await runtime.migrate()
    async with runtime:
        yield runtime


async def _woken(rl: Runlane, run_id: str, finish: Any) -> Run:
    """Wait for ``run_id`` while ``finish`` (a coroutine) finishes it; the waiter must
    hear of it within a few seconds."""
    waiting = asyncio.ensure_future(rl.runs.wait(run_id, timeout="30s"))
    await asyncio.sleep(0.3)  # the waiter has read the run unfinished and listens
    started = time.monotonic()
    await finish
    run = await asyncio.wait_for(waiting, 10)
    assert time.monotonic() - started < 10
    return run


async def test_waiters_wake_for_a_success_a_failure_and_a_cancel(rl: Runlane) -> None:
    done = await rl.trigger(ok, None)
    assert (await _woken(rl, done.id, rl.execute_next())).status is RunStatus.SUCCEEDED
    failed = await rl.trigger(boom, None)
    assert (await _woken(rl, failed.id, rl.execute_next())).status is RunStatus.FAILED
    queued = await rl.trigger(ok, None, delay="1h")
    assert (await _woken(rl, queued.id, rl.runs.cancel(queued.id))).status is RunStatus.CANCELLED


async def test_waiters_wake_for_a_lease_recovered_by_tick(
    rl: Runlane, postgres_dsn: str, environment: str
) -> None:
    run = await rl.trigger(ok, None)
    # A worker that claimed it and died: its lease has expired.
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE runlane.runlane_runs SET status = 'running', attempt = 1, "
            "lease_owner = 'gone', lease_token = 'gone', lease_expires_at = %s "
            "WHERE environment = %s AND id = %s",
            (to_micros(NOW - timedelta(days=1)), environment, run.id),
        )
    assert (await _woken(rl, run.id, rl.tick())).status is RunStatus.FAILED
