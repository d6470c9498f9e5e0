"""Publishing messages: deduplication, message ids, the sequence and the delivery runs,
in one transaction.

SQLite serialises writers, so the checks read what the write will find: a key or
id another publish holds was committed before this transaction began, and the
sequence drawn here follows commit order.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from runlane.ports.storage import NewMessage, OutboxMessage, PublishOutcome, StoredMessage
from runlane.storage.sql.batches import check_distinct_delivery_ids, taken_run_id
from runlane.storage.sql.encoding import DELIVERY_REQUEST_SEQUENCE, dumps, micros_or_none
from runlane.storage.sql.messages import (
    check_reuse,
    deduplication_params,
    delivery_run,
    is_plain_message,
    key_params,
    message_from_row,
    message_params,
    needs_key_check,
    publish_source,
    stored_message,
)
from runlane.storage.sql.rows import runs_from_rows
from runlane.storage.sqlite.claims import ensure_rate_key_triggers
from runlane.storage.sqlite.connections import SqliteConnection
from runlane.storage.sqlite.dispatch import insert_outbox
from runlane.storage.sqlite.params import delivery_event
from runlane.storage.sqlite.queries import QUERIES
from runlane.types.clock import to_micros
from runlane.types.runs import Run

_SAVEPOINT = "runlane_publish"


def publish_messages(
    db: SqliteConnection,
    environment: str,
    messages: Sequence[NewMessage],
    now: datetime,
    connection: sqlite3.Connection | None,
    outbox_claimed_until: datetime | None,
) -> list[PublishOutcome]:
    """Publish ``messages`` in a transaction of their own, or in ``connection``'s.

    In the caller's transaction the publish sits in a savepoint, so a refused
    message id takes back every message of the call and nothing else of theirs.
    """
    check_distinct_delivery_ids(messages)
    now_us = to_micros(now)
    claimed_until = micros_or_none(outbox_claimed_until)
    with db.transaction(connection) as cur:
        # A caller's connection may have no row factory: this cursor reads by name.
        cur.row_factory = sqlite3.Row
        if any(d.rate_key is not None for m in messages for d in m.deliveries):
            ensure_rate_key_triggers(cur)
        if connection is None:
            return _publish_all(cur, environment, messages, now_us, claimed_until)
        cur.execute(f"SAVEPOINT {_SAVEPOINT}")
        try:
            outcomes = _publish_all(cur, environment, messages, now_us, claimed_until)
        except BaseException:
            cur.execute(f"ROLLBACK TO {_SAVEPOINT}")
            cur.execute(f"RELEASE {_SAVEPOINT}")
            raise
        cur.execute(f"RELEASE {_SAVEPOINT}")
        return outcomes


def _publish_all(
    cur: sqlite3.Cursor,
    environment: str,
    messages: Sequence[NewMessage],
    now_us: int,
    claimed_until: int | None,
) -> list[PublishOutcome]:
    """Plain messages (no deduplication key, no keyed delivery, distinct ids) in bulk;
    any other call one message at a time."""
    ids = {m.id for m in messages}
    if (
        len(messages) > 1
        and len(ids) == len(messages)
        and all(is_plain_message(m) for m in messages)
    ):
        return _publish_plain(cur, environment, messages, now_us, claimed_until)
    return [_publish(cur, environment, m, now_us, claimed_until) for m in messages]


def _publish_plain(
    cur: sqlite3.Cursor,
    environment: str,
    messages: Sequence[NewMessage],
    now_us: int,
    claimed_until: int | None,
) -> list[PublishOutcome]:
    """What :func:`_publish` writes for each message, in a few statements for all: the
    stored ids read at once, the sequences drawn at once, the messages, runs and
    events each inserted with one ``executemany``."""
    found = cur.execute(
        QUERIES["get_messages"],
        {"environment": environment, "ids": dumps([m.id for m in messages])},
    ).fetchall()
    stored = {row["id"]: row for row in found}
    fresh = [m for m in messages if m.id not in stored]
    sequences: dict[str, int] = {}
    if fresh:
        params = {"environment": environment, "count": len(fresh)}
        (last,) = cur.execute(QUERIES["next_message_sequences"], params).fetchone()
        first = last - len(fresh) + 1
        sequences = {m.id: first + i for i, m in enumerate(fresh)}
        cur.executemany(
            QUERIES["insert_message"],
            [
                {**message_params(environment, m, now_us), "sequence": sequences[m.id]}
                for m in fresh
            ],
        )
    planned_runs: list[tuple[NewMessage, list[Run]]] = []
    rows: list[dict[str, Any]] = []
    events: list[dict[str, Any]] = []
    requested_runs: list[Run] = []
    for message in fresh:
        source_text = dumps(publish_source(message).to_json())
        runs = []
        for delivery in message.deliveries:
            planned = delivery_run(
                environment, message, delivery, sequences[message.id], now_us,
                source_text=source_text, requested=delivery.request_delivery,
            )  # fmt: skip
            run = planned.run
            rows.append(planned.params)
            if planned.requested:
                events.append(delivery_event(environment, run, DELIVERY_REQUEST_SEQUENCE, now_us))
                requested_runs.append(run)
            runs.append(run)
        planned_runs.append((message, runs))
    if rows:
        cur.executemany(QUERIES["insert_delivery"], rows)
        if cur.rowcount != len(rows):
            _refuse_taken_run_id(cur, environment, rows)
    outbox = {
        run.id: insert_outbox(
            cur, environment, run, DELIVERY_REQUEST_SEQUENCE, now_us, claimed_until
        )
        for run in requested_runs
    }
    if events:
        cur.executemany(QUERIES["insert_event"], events)
    written = {
        message.id: PublishOutcome(
            stored_message(message, sequences[message.id], now_us),
            duplicate=False,
            runs=runs,
            outbox=tuple(outbox[run.id] for run in runs if run.id in outbox),
        )
        for message, runs in planned_runs
    }
    outcomes = []
    for message in messages:
        if message.id in written:
            outcomes.append(written[message.id])
            continue
        existing = stored[message.id]
        check_reuse(message, existing["envelope"])
        outcomes.append(_duplicate(cur, environment, message_from_row(existing)))
    return outcomes


def _refuse_taken_run_id(cur: sqlite3.Cursor, environment: str, rows: list[dict[str, Any]]) -> None:
    """A delivery run was not inserted: its id is another run's. Name it."""
    for row in rows:
        stored = cur.execute(
            QUERIES["get_run"], {"environment": environment, "id": row["id"]}
        ).fetchone()
        if stored is None or stored["message_sequence"] != row["message_sequence"]:
            raise taken_run_id(row["id"])
    raise AssertionError("a delivery run was not inserted, yet every id is its own")


def _publish(
    cur: sqlite3.Cursor,
    environment: str,
    message: NewMessage,
    now_us: int,
    claimed_until: int | None,
) -> PublishOutcome:
    dedup = (
        deduplication_params(environment, message, now_us)
        if message.deduplication_key is not None
        else None
    )
    if dedup is not None:
        held = cur.execute(QUERIES["get_live_deduplication_entry"], dedup).fetchone()
        if held is not None:
            return _duplicate(cur, environment, message_from_row(held))
    # Insert first: a stored id inserts nothing, and only then is the stored one read.
    inserted = cur.execute(
        QUERIES["insert_next_message"], message_params(environment, message, now_us)
    ).fetchone()
    if inserted is None:
        existing = cur.execute(
            QUERIES["get_message"], {"environment": environment, "id": message.id}
        ).fetchone()
        check_reuse(message, existing["envelope"])
        return _duplicate(cur, environment, message_from_row(existing))
    sequence = int(inserted[0])
    (drawn,) = cur.execute(
        QUERIES["next_message_sequence"], {"environment": environment}
    ).fetchone()
    assert drawn == sequence, "the message sequence counter moved under a serialised writer"
    if dedup is not None:
        cur.execute(QUERIES["upsert_deduplication_key"], dedup)
    runs, outbox = _create_deliveries(cur, environment, message, sequence, now_us, claimed_until)
    return PublishOutcome(
        stored_message(message, sequence, now_us), duplicate=False, runs=runs, outbox=outbox
    )


def _create_deliveries(
    cur: sqlite3.Cursor,
    environment: str,
    message: NewMessage,
    sequence: int,
    now_us: int,
    claimed_until: int | None,
) -> tuple[list[Run], tuple[OutboxMessage, ...]]:
    """One QUEUED run per delivery, with its events, and a delivery request where one
    was asked for and the delivery is claimable at once."""
    source_text = dumps(publish_source(message).to_json())
    runs: list[Run] = []
    outbox: list[OutboxMessage] = []
    events: list[dict[str, Any]] = []
    for delivery in message.deliveries:
        requested = delivery.request_delivery
        if needs_key_check(delivery):
            params = key_params(environment, delivery, sequence, now_us)
            requested = bool(cur.execute(QUERIES["delivery_key_is_free"], params).fetchone()[0])
        planned = delivery_run(
            environment, message, delivery, sequence, now_us,
            source_text=source_text, requested=requested,
        )  # fmt: skip
        run = planned.run
        if cur.execute(QUERIES["insert_delivery"], planned.params).rowcount != 1:
            raise taken_run_id(run.id)
        if requested:
            events.append(delivery_event(environment, run, DELIVERY_REQUEST_SEQUENCE, now_us))
            outbox.append(
                insert_outbox(
                    cur, environment, run, DELIVERY_REQUEST_SEQUENCE, now_us, claimed_until
                )
            )
        runs.append(run)
    cur.executemany(QUERIES["insert_event"], events)
    return runs, tuple(outbox)


def _duplicate(cur: sqlite3.Cursor, environment: str, original: StoredMessage) -> PublishOutcome:
    """The original's outcome: its message and its deliveries as they are now."""
    rows = cur.execute(
        QUERIES["runs_of_message"], {"environment": environment, "sequence": original.sequence}
    ).fetchall()
    return PublishOutcome(original, duplicate=True, runs=runs_from_rows(rows))
