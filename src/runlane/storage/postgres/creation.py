"""Creating runs: one statement for a batch without keys, key-aware steps otherwise.

Runs with idempotency or singleton keys are created one at a time inside the
caller's transaction, race-safe without any table lock:

* the idempotency key row is inserted for the new run, or, if the key is
  owned, locked (``ON CONFLICT DO UPDATE`` waits for a concurrent trigger of the
  same key to commit); the owner is then read in a fresh snapshot and returned
  if it still holds the key, otherwise the key is taken over;
* the singleton rule is the partial unique index: the insert skips the run
  (``ON CONFLICT DO NOTHING``, again after waiting for a concurrent insert) and
  the active owner is returned instead.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from typing import Any

import psycopg
from psycopg.pq.abc import PGresult

from runlane.model.capacity import owner_holds
from runlane.ports.storage import CreateOutcome, NewRun
from runlane.storage.postgres.params import (
    WORK_CHANNEL,
    CreationBatch,
    copy_text,
    plain_batch,
    plain_runs,
)
from runlane.storage.postgres.sessions import (
    AsyncSession,
    DriverConnection,
    Queries,
    Session,
    caller_session,
)
from runlane.storage.sql.batches import keyed_queues
from runlane.storage.sql.encoding import micros_or_none
from runlane.storage.sql.rows import run_from_row
from runlane.types.clock import from_micros
from runlane.types.errors import ErrorCode, RunlaneError
from runlane.types.runs import Lease, Run


async def create_runs(session: Session, q: Queries, batch: CreationBatch) -> list[CreateOutcome]:
    """Create every run of ``batch`` on ``session`` (inside a transaction when keyed)."""
    if batch.keyed:
        return [await create_keyed_run(session, q, batch, i) for i in range(len(batch.runs))]
    inserted = await session.fetch(q["insert_runs"], batch.insert_params())
    if len(inserted) != len(batch.runs):
        raise _not_created(len(batch.runs) - len(inserted))
    return batch.outcomes()


async def create_batch(
    q: Queries, batch: CreationBatch, conn: DriverConnection
) -> list[CreateOutcome]:
    """Create ``batch`` on the driver's autocommit ``conn``: one statement without keys,
    one transaction with them."""
    if not batch.keyed:
        return await create_runs(AsyncSession(conn), q, batch)
    async with conn.transaction():
        return await create_runs(AsyncSession(conn), q, batch)


async def create_in_caller_transaction(
    connection: Any,
    q: Queries,
    batch: CreationBatch,
    error: Callable[[BaseException], RunlaneError],
) -> list[CreateOutcome]:
    """Create ``batch`` on the caller's psycopg connection (sync or async), inside the
    caller's open transaction; nothing is committed here."""
    return await in_caller_transaction(
        connection, lambda session: create_runs(session, q, batch), error
    )


async def in_caller_transaction(
    connection: Any,
    create: Callable[[Session], Awaitable[list[CreateOutcome]]],
    error: Callable[[BaseException], RunlaneError],
) -> list[CreateOutcome]:
    """Run ``create`` on a session of the caller's psycopg connection (sync or async),
    inside the caller's open transaction (or one of its own when none is open)."""
    session, own_transaction = caller_session(connection)
    try:
        if own_transaction:
            async with session.transaction():
                return await create(session)
        return await create(session)
    except psycopg.Error as failure:
        raise error(failure) from None


def handed_lease(result: PGresult) -> Lease | None:
    """The lease ``insert_run_handoff`` wrote (its ``result``) when it handed the run to a
    worker standing by; None when it did not."""
    if not result.ntuples:
        return None
    owner, token, expires = (result.get_value(0, column) for column in (1, 2, 3))
    if owner is None or token is None or expires is None:
        return None  # notified the environment's workers: not handed off
    return Lease(owner.decode(), token.decode(), from_micros(int(expires)))


def plain_batches(batches: Iterable[Sequence[NewRun]]) -> Iterator[Sequence[NewRun]]:
    """``batches``, refusing a run with a key or a delivery request (a stream takes none)."""
    for runs in batches:
        if not plain_batch(runs):
            raise RunlaneError(
                ErrorCode.INTERNAL_ERROR,
                "a run stream takes runs without keys or delivery requests only.",
            )
        yield runs


async def copy_stream(
    q: Queries,
    environment: str,
    batches: Iterable[Sequence[NewRun]],
    now_us: int,
    conn: DriverConnection,
) -> list[Run]:
    """:func:`copy_run_stream` in one transaction on the driver's ``conn``."""
    announce = {"channel": WORK_CHANNEL, "environment": environment}
    async with conn.transaction():
        return await copy_run_stream(conn, q, environment, batches, now_us, announce)


async def copy_run_stream(
    conn: psycopg.AsyncConnection[Any],
    q: Queries,
    environment: str,
    batches: Iterable[Sequence[NewRun]],
    now_us: int,
    announce: dict[str, Any],
) -> list[Run]:
    """Write every batch of plain runs (:func:`.params.plain_batch`) into one
    ``copy_runs`` stream, building the runs as stored while the server stores the
    rows sent; the next batch is built (and, when ``batches`` is lazy, validated)
    meanwhile. The caller holds the transaction; the wakeup (``announce``) goes out if
    a run is due."""
    created: list[Run] = []
    due = False
    partitioned: set[str] = set()
    async with conn.cursor() as cur:
        async with cur.copy(q["copy_runs"]) as copy:
            for runs in batches:
                data, batch_due = copy_text(environment, runs, now_us)
                await copy.write(data)
                created += plain_runs(environment, runs, now_us)
                due = due or batch_due
                partitioned |= keyed_queues(runs)
        if partitioned:
            # Their bounded claims rank per partition from now on (migration 023).
            await cur.execute(
                q["name_partitioned_queues"],
                {"environment": environment, "queues": sorted(partitioned)},
            )
        if due:
            await cur.execute(q["announce_work"], announce)
    return created


async def create_keyed_run(
    session: Session, q: Queries, batch: CreationBatch, index: int
) -> CreateOutcome:
    """Create run ``index`` unless its idempotency key or singleton key has an owner."""
    new = batch.runs[index]
    key: dict[str, Any] | None = None
    fresh_key = False
    if new.idempotency_key is not None:
        key = {
            "environment": batch.environment,
            "task_id": new.task_id,
            "key": new.idempotency_key,
            "run_id": new.id,
            "expires_at": micros_or_none(new.idempotency_expires_at),
        }
        (ownership,) = await session.fetch(q["lock_idempotency_key"], key)
        fresh_key = ownership["run_id"] == new.id
        if not fresh_key:
            rows = await session.fetch(
                q["get_run"], {"environment": batch.environment, "id": ownership["run_id"]}
            )
            if rows and owner_holds(rows[0]["status"], ownership["key_expires_at"], batch.now_us):
                return CreateOutcome(run_from_row(rows[0]), created=False)
    inserted = await session.fetch(q["insert_runs"], batch.insert_params([index]))
    if not inserted:
        owner = await _active_singleton_owner(session, q, batch.environment, new)
        if owner is None:
            raise _not_created(1)
        if fresh_key and key is not None:
            await session.fetch(q["drop_idempotency_key_of_run"], key)
        return CreateOutcome(owner, created=False)
    if key is not None and not fresh_key:
        await session.fetch(q["take_idempotency_key"], key)
    return batch.created(index)


async def _active_singleton_owner(
    session: Session, q: Queries, environment: str, new: NewRun
) -> Run | None:
    if new.singleton_key is None:
        return None
    rows = await session.fetch(
        q["get_active_singleton_owner"],
        {"environment": environment, "task_id": new.task_id, "singleton_key": new.singleton_key},
    )
    return run_from_row(rows[0]) if rows else None


def _not_created(count: int) -> RunlaneError:
    return RunlaneError(
        ErrorCode.STORAGE_CONFLICT,
        f"{count} run(s) could not be created: their ids already exist, or the active run "
        "holding their singleton key finished meanwhile; trigger again.",
        retryable=True,
    )
