"""Creating runs with their events, ownership rows and delivery requests, atomically.

Runs without keys or lease own nothing and conflict with nothing: they are written
in bulk. Every other run is created one at a time: a run whose idempotency key is
held, or whose singleton key has an active run, is not created, and its outcome
carries the owner instead.
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from collections.abc import Sequence
from datetime import datetime

from runlane.model.capacity import owner_holds
from runlane.model.dependencies import (
    SETTLED_STATUSES,
    missing_dependencies,
    unsettled_and_failed,
)
from runlane.ports.storage import (
    CreateOutcome,
    LeaseRequest,
    NewRun,
    NewRunBatch,
    NewWaitingRun,
    OutboxMessage,
)
from runlane.storage.sql.batches import check_distinct_run_ids, keyed_queues
from runlane.storage.sql.encoding import DELIVERY_REQUEST_SEQUENCE, micros_or_none
from runlane.storage.sql.rows import run_from_row
from runlane.storage.sqlite.claims import ensure_rate_key_triggers
from runlane.storage.sqlite.connections import SqliteConnection
from runlane.storage.sqlite.dispatch import insert_outbox
from runlane.storage.sqlite.params import (
    batch_params,
    creation_events,
    insert_params,
    is_plain,
    plain_batch,
    plain_statement,
    run_from_new,
    shape_end,
)
from runlane.storage.sqlite.queries import NUMBERED, QUERIES
from runlane.types.clock import from_micros, to_micros
from runlane.types.errors import ErrorCode, RunlaneError
from runlane.types.ids import new_token
from runlane.types.runs import Run, RunStatus

#: Stretches of at least this many same-shaped runs go in as one JSON array; fewer
#: are cheaper row by row (encoding and reading the array has a fixed cost).
MIN_ARRAY_BATCH = 8


def create_runs(
    db: SqliteConnection,
    environment: str,
    runs: Sequence[NewRun],
    now: datetime,
    lease: LeaseRequest | None,
    connection: sqlite3.Connection | None,
    outbox_claimed_until: datetime | None,
) -> list[CreateOutcome]:
    """Create ``runs`` in a transaction of their own, or in ``connection``'s open one;
    a run whose id exists fails the call with ``STORAGE_CONFLICT``, and nothing of it
    is kept (in a caller's transaction, its savepoint is rolled back)."""
    try:
        now_us = to_micros(now)
        claimed_until = micros_or_none(outbox_claimed_until)
        outcomes: list[CreateOutcome] = []
        if connection is None and lease is None and len(runs) == 1:
            new = runs[0]
            if (
                is_plain(new)
                and not new.request_delivery
                and type(new) is NewRun
                and new.rate_key is None
                and new.concurrency_key is None
            ):
                # A lone trigger: one row and nothing else (run.created is implied by it),
                # so one autocommitted statement.
                insert = NUMBERED["insert_plain_run"]
                db.write_one(
                    insert.sql, insert.values(insert_params(environment, new, now_us, None, None))
                )
                return [
                    CreateOutcome(run_from_new(environment, new, from_micros(now_us)), created=True)
                ]
        token = new_token() if lease is not None else None
        with db.transaction(connection) as cur:
            if any(new.rate_key is not None for new in runs):
                ensure_rate_key_triggers(cur)
            name_partitioned_queues(cur, environment, keyed_queues(runs))
            if any(isinstance(new, NewWaitingRun) for new in runs):
                # Dependencies are rare: such calls go row by row.
                return [
                    create_waiting_run(cur, environment, new, now_us)
                    if isinstance(new, NewWaitingRun)
                    else create_run(cur, environment, new, now_us, lease, token, claimed_until)
                    for new in runs
                ]
            if lease is None and all(is_plain(new) for new in runs):
                return _create_plain_runs(cur, environment, runs, now_us, claimed_until)
            for new in runs:
                outcomes.append(
                    create_run(cur, environment, new, now_us, lease, token, claimed_until)
                )
        return outcomes
    except sqlite3.IntegrityError as error:
        # Keys and singletons are looked up before their rows are written, so the
        # constraint broken is a taken id.
        raise _taken_id(error, "a run's id exists already") from error


def create_run_batch(
    db: SqliteConnection,
    environment: str,
    batch: NewRunBatch,
    now: datetime,
    connection: sqlite3.Connection | None,
) -> list[Run]:
    """Create the plain runs of ``batch`` with one statement, in a transaction of their
    own or in ``connection``'s open one."""
    check_distinct_run_ids(batch.ids)
    if not batch.ids:
        return []
    run_params, created = batch_params(environment, batch, to_micros(now))
    try:
        with db.transaction(connection) as cur:
            if batch.rate_key is not None:
                ensure_rate_key_triggers(cur)
            if batch.concurrency_key is not None:
                name_partitioned_queues(cur, environment, {batch.queue})
            cur.execute(QUERIES[plain_statement(run_params["rows"])], run_params)
    except sqlite3.IntegrityError as error:
        # The one constraint a plain run can break: its id is taken (the statement is
        # undone whole, in a caller's transaction too).
        raise _taken_id(error, "a run of the batch has an id that exists") from error
    return created


def _taken_id(error: sqlite3.IntegrityError, what: str) -> RunlaneError:
    """The ``STORAGE_CONFLICT`` of a write that met a taken run id (``what`` says which):
    the write was undone whole (its own transaction, or its savepoint in a caller's).
    Raised from an ``except`` clause: a ``try`` costs the common path nothing."""
    return RunlaneError(ErrorCode.STORAGE_CONFLICT, f"{what} ({error}); nothing was created.")


def create_members(
    cur: sqlite3.Cursor,
    environment: str,
    runs: Sequence[NewRun],
    now_us: int,
    claimed_until: int | None,
) -> list[CreateOutcome]:
    """The members of a group: plain runs, written in bulk inside ``cur``'s transaction
    (with their delivery requests, claimed until ``claimed_until`` if given)."""
    if any(new.rate_key is not None for new in runs):
        ensure_rate_key_triggers(cur)
    name_partitioned_queues(cur, environment, keyed_queues(runs))
    return _create_plain_runs(cur, environment, runs, now_us, claimed_until)


def name_partitioned_queues(cur: sqlite3.Cursor, environment: str, queues: set[str]) -> None:
    """Name ``queues`` (of runs with a concurrency key), in the transaction that writes
    the runs: their bounded claims rank every due run per key (migration 018)."""
    if queues:
        cur.executemany(
            QUERIES["name_partitioned_queue"],
            [{"environment": environment, "queue": queue} for queue in sorted(queues)],
        )


def _create_plain_runs(
    cur: sqlite3.Cursor,
    environment: str,
    runs: Sequence[NewRun],
    now_us: int,
    claimed_until: int | None,
) -> list[CreateOutcome]:
    """Runs without keys or lease own nothing and conflict with nothing: write them in
    bulk, one statement per stretch of runs of the same shape (a bulk trigger is one
    stretch)."""
    outcomes: list[CreateOutcome] = []
    start = 0
    while start < len(runs):
        first, stop = runs[start], shape_end(runs, start)
        group = runs[start:stop]
        if first.request_delivery or len(group) < MIN_ARRAY_BATCH:
            outcomes += _create_row_by_row(cur, environment, group, now_us, claimed_until)
        else:
            run_params, created = plain_batch(environment, group, now_us)
            cur.execute(QUERIES[plain_statement(run_params["rows"])], run_params)
            outcomes += [CreateOutcome(run, created=True) for run in created]
        start = stop
    return outcomes


def _create_row_by_row(
    cur: sqlite3.Cursor,
    environment: str,
    runs: Sequence[NewRun],
    now_us: int,
    claimed_until: int | None,
) -> list[CreateOutcome]:
    """Plain runs one statement execution each (with outbox rows for those asking for a
    delivery): cheaper than the JSON array for a few runs, such as one lone trigger.
    The runs share their shape, and so their rate key or its absence."""
    keyed = runs[0].rate_key is not None
    insert = NUMBERED["insert_plain_keyed_run" if keyed else "insert_plain_run"]
    cur.executemany(
        insert.sql,
        [insert.values(insert_params(environment, new, now_us, None, None)) for new in runs],
    )
    now = from_micros(now_us)
    created = [run_from_new(environment, new, now) for new in runs]
    events = [
        event
        for run, new in zip(created, runs, strict=True)
        for event in creation_events(environment, run, now_us, new.request_delivery)
    ]
    cur.executemany(QUERIES["insert_event"], events)
    return [
        CreateOutcome(
            run,
            created=True,
            outbox=_request_delivery(cur, environment, run, new, now_us, claimed_until),
        )
        for run, new in zip(created, runs, strict=True)
    ]


def create_run(
    cur: sqlite3.Cursor,
    environment: str,
    new: NewRun,
    now_us: int,
    lease: LeaseRequest | None,
    token: str | None,
    outbox_claimed_until: int | None = None,
) -> CreateOutcome:
    """Create one run unless its idempotency key or singleton key has an owner."""
    existing = _find_owner(cur, environment, new, now_us)
    if existing is not None:
        return CreateOutcome(existing, created=False)
    row = cur.execute(
        QUERIES["insert_run"], insert_params(environment, new, now_us, lease, token)
    ).fetchone()
    if row is None:
        # Lost a race on the singleton index; the winner is the owner.
        owner = _find_owner(cur, environment, new, now_us)
        if owner is None:
            raise RunlaneError(
                ErrorCode.STORAGE_CONFLICT,
                f"run {new.id} could not be created.",
                retryable=True,
            )
        return CreateOutcome(owner, created=False)
    run = run_from_row(row)
    cur.executemany(
        QUERIES["insert_event"], creation_events(environment, run, now_us, new.request_delivery)
    )
    outbox = _request_delivery(cur, environment, run, new, now_us, outbox_claimed_until)
    if new.idempotency_key is not None:
        cur.execute(
            QUERIES["upsert_idempotency_key"],
            {
                "environment": environment,
                "task_id": new.task_id,
                "key": new.idempotency_key,
                "run_id": new.id,
                "expires_at": micros_or_none(new.idempotency_expires_at),
            },
        )
    return CreateOutcome(run, created=True, outbox=outbox)


def _request_delivery(
    cur: sqlite3.Cursor,
    environment: str,
    run: Run,
    new: NewRun,
    now_us: int,
    claimed_until: int | None,
) -> tuple[OutboxMessage, ...]:
    """The new run's delivery request, if it asked for one."""
    if not new.request_delivery:
        return ()
    return (insert_outbox(cur, environment, run, DELIVERY_REQUEST_SEQUENCE, now_us, claimed_until),)


def _find_owner(cur: sqlite3.Cursor, environment: str, new: NewRun, now_us: int) -> Run | None:
    if new.idempotency_key is not None:
        row = cur.execute(
            QUERIES["get_idempotency_owner"],
            {"environment": environment, "task_id": new.task_id, "key": new.idempotency_key},
        ).fetchone()
        if (
            row is not None
            and row["id"] is not None
            and owner_holds(row["status"], row["key_expires_at"], now_us)
        ):
            return run_from_row(row)
    if new.singleton_key is not None:
        row = cur.execute(
            QUERIES["get_active_singleton_owner"],
            {
                "environment": environment,
                "task_id": new.task_id,
                "singleton_key": new.singleton_key,
            },
        ).fetchone()
        if row is not None:
            return run_from_row(row)
    return None


def create_waiting_run(
    cur: sqlite3.Cursor, environment: str, new: NewWaitingRun, now_us: int
) -> CreateOutcome:
    """Create ``new`` (with ``after``) as a waiting run with its edges; a run whose
    dependencies have all finished is released or cancelled before this returns.
    Unknown dependencies raise ``RUN_NOT_FOUND`` before anything is written."""
    ids = json.dumps(list(new.after))
    scope = {"environment": environment, "ids": ids}
    statuses = {
        row["id"]: RunStatus(row["status"])
        for row in cur.execute(QUERIES["dependency_statuses"], scope)
    }
    error = missing_dependencies(new.after, statuses)
    if error is not None:
        raise error
    # The delivery request, if any, is written when the run is released.
    waiting = dataclasses.replace(new, status=RunStatus.WAITING, request_delivery=False)
    outcome = create_run(cur, environment, waiting, now_us, None, None)
    if not outcome.created:
        return outcome
    cur.execute(QUERIES["mark_dependencies"], scope)
    pending, failed = unsettled_and_failed(new.after, statuses)
    cur.execute(
        QUERIES["insert_dependency_edges"],
        {
            "environment": environment,
            "dependent_id": new.id,
            "rows": json.dumps(
                [
                    [position, run_id, int(statuses[run_id] in SETTLED_STATUSES)]
                    for position, run_id in enumerate(new.after)
                ]
            ),
        },
    )
    params = {
        "environment": environment,
        "id": new.id,
        "pending": pending,
        "failed_dependency": failed,
        "on_failure": new.on_failure,
        "deliver_when_due": int(new.request_delivery),
        "now": now_us,
    }
    cur.execute(QUERIES["insert_waiting_run"], params)
    cur.execute(QUERIES["release_if_met"], params)
    row = cur.execute(QUERIES["get_run"], {"environment": environment, "id": new.id}).fetchone()
    return CreateOutcome(run_from_row(row), created=True)
