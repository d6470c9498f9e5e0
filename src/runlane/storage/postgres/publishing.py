"""Publishing messages: deduplication, message ids, the sequence and the delivery runs,
in one transaction (a savepoint inside a caller's).

Concurrent publishes meet on rows, never on a table lock: a message id or a
deduplication key another publish is writing is waited for (``ON CONFLICT``), then
compared with. Before the sequence is drawn the publish takes one advisory lock per
(subscription, key) it reaches, in sorted order, so for one key sequence order is
commit order (5.7.4).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg.pq import TransactionStatus

from runlane.ports.storage import (
    NewDelivery,
    NewMessage,
    OutboxMessage,
    PublishOutcome,
    StoredMessage,
)
from runlane.storage.postgres.params import WORK_CHANNEL
from runlane.storage.postgres.sessions import (
    AsyncSession,
    DriverConnection,
    Queries,
    Session,
    caller_session,
)
from runlane.storage.sql.batches import taken_run_id
from runlane.storage.sql.claiming import key_lock_name
from runlane.storage.sql.encoding import DELIVERY_REQUEST_SEQUENCE, dumps
from runlane.storage.sql.messages import (
    check_reuse,
    deduplication_params,
    delivery_run,
    is_plain_message,
    message_from_row,
    message_params,
    publish_source,
    stored_message,
)
from runlane.storage.sql.rows import runs_from_rows
from runlane.types.clock import to_micros
from runlane.types.errors import RunlaneError
from runlane.types.runs import Run


class PublishCall:
    """One ``publish_messages`` call of the driver: on its own connection
    (:meth:`on_connection`, for :meth:`.connections.PostgresConnection.run`) or inside
    the caller's transaction (:meth:`in_caller_transaction`)."""

    __slots__ = ("_claimed_until", "_environment", "_messages", "_now_us", "_publish", "_q")

    def __init__(
        self,
        q: Queries,
        schema: str,
        environment: str,
        messages: Sequence[NewMessage],
        now_us: int,
        claimed_until: int | None,
    ) -> None:
        self._q = q
        self._environment = environment
        self._messages = messages
        self._now_us = now_us
        self._claimed_until = claimed_until
        self._publish = partial(
            publish_messages,
            q=q,
            environment=environment,
            messages=messages,
            now_us=now_us,
            claimed_until=claimed_until,
            locks=lock_names(schema, environment, messages),
        )

    async def in_caller_transaction(
        self, connection: Any, error: Callable[[BaseException], RunlaneError]
    ) -> list[PublishOutcome]:
        """Publish on the caller's psycopg connection (sync or async), joining its open
        transaction in a savepoint: a refused message id takes back this call only."""
        session, own_transaction = caller_session(connection)
        try:
            if not own_transaction and connection.info.transaction_status == TransactionStatus.IDLE:
                # Idle outside autocommit: open the caller's transaction as their next
                # statement would, so the savepoint below sits inside it (a transaction
                # block begun here would commit at its end).
                await session.fetch(self._q["open_caller_transaction"], {})
            try:
                async with session.transaction():
                    return await self._publish(session)
            except pg_errors.UniqueViolation:
                # Only the bulk statement raises it (an id taken meanwhile): its
                # savepoint is gone; publish again the general way.
                async with session.transaction():
                    return await self._publish(session, bulk=False)
        except psycopg.Error as failure:
            raise error(failure) from None

    async def on_connection(self, conn: DriverConnection) -> list[PublishOutcome]:
        """Publish on the driver's autocommit ``conn``: a plain message, or a group of
        them, in one autocommitted statement; anything else in one transaction."""
        messages, q, environment = self._messages, self._q, self._environment
        session = AsyncSession(conn)
        if is_plain(messages):
            outcome = await publish_plain_message(
                session, q, environment, messages[0], self._now_us, self._claimed_until
            )
            if outcome is not None:
                return [outcome]
        elif len(bulk_positions(messages)) == len(messages):
            # A group of plain publishes: one autocommitted statement, as for concurrent
            # triggers. A stored id writes nothing, a taken one fails it whole: then the
            # general way, which compares or names it.
            try:
                outcomes = await publish_plain_messages(
                    session, q, environment, messages, self._now_us, self._claimed_until
                )
            except pg_errors.UniqueViolation:
                outcomes = None
            if outcomes is not None:
                return outcomes
        async with conn.transaction():
            return await self._publish(session, bulk=False)


def lock_names(schema: str, environment: str, messages: Sequence[NewMessage]) -> list[str]:
    """Every (subscription, key) lock the messages' keyed deliveries need, sorted by
    (subscription, key) so that all publishers take them in one order."""
    pairs = sorted(
        {
            (d.subscription, d.partition_key)
            for m in messages
            for d in m.deliveries
            if d.partition_key is not None
        }
    )
    return [key_lock_name(schema, environment, sub, key) for sub, key in pairs]


def is_plain(messages: Sequence[NewMessage]) -> bool:
    """Whether the call is one message without a deduplication key whose deliveries
    need no key lock: :func:`publish_plain_message` publishes it in one statement."""
    return len(messages) == 1 and is_plain_message(messages[0])


async def publish_plain_message(
    session: Session,
    q: Queries,
    environment: str,
    message: NewMessage,
    now_us: int,
    claimed_until: int | None,
) -> PublishOutcome | None:
    """Publish a message :func:`is_plain` accepts in one statement (autocommitted on a
    pooled connection); ``None`` when a delivery run id was taken: the statement
    failed whole, and the caller publishes again the general way, which says which id."""
    params = {
        **message_params(environment, message, now_us),
        **_delivery_params(environment, message, now_us, claimed_until),
    }
    try:
        rows = await session.fetch(q["publish_plain_message"], params)
    except pg_errors.UniqueViolation:
        return None
    if not rows:
        (existing,) = await session.fetch(
            q["get_message"], {"environment": environment, "id": message.id}
        )
        check_reuse(message, existing["envelope"])
        return await _duplicate(session, q, environment, message_from_row(existing))
    sequence = int(rows[0]["sequence"])
    asked = {d.run_id: d.request_delivery for d in message.deliveries}
    runs, outbox = _outcome_runs(environment, message, sequence, now_us, asked)
    return PublishOutcome(
        stored_message(message, sequence, now_us), duplicate=False, runs=runs, outbox=outbox
    )


async def publish_messages(
    session: Session,
    q: Queries,
    environment: str,
    messages: Sequence[NewMessage],
    now_us: int,
    claimed_until: int | None,
    locks: list[str],
    *,
    bulk: bool = True,
) -> list[PublishOutcome]:
    """Publish ``messages`` on ``session``, inside the transaction the caller opened.

    With ``bulk`` the plain messages (:func:`is_plain_message`, ids distinct within
    the call) go in one statement, which raises ``UniqueViolation`` (the transaction
    is then lost: the caller publishes again without ``bulk``) if an id or run id
    was taken meanwhile; every other message, and any when a plain one's id is
    stored already, is published in turn the general way.
    """
    if locks:
        await session.fetch(q["lock_delivery_keys"], {"names": locks})
    plain = bulk_positions(messages) if bulk else []
    outcomes: dict[int, PublishOutcome] = {}
    if plain:
        chosen = [messages[i] for i in plain]
        written = await publish_plain_messages(
            session, q, environment, chosen, now_us, claimed_until
        )
        if written is not None:
            outcomes.update(zip(plain, written, strict=True))
    for position, message in enumerate(messages):
        if position not in outcomes:
            outcomes[position] = await _publish(
                session, q, environment, message, now_us, claimed_until
            )
    return [outcomes[position] for position in range(len(messages))]


def bulk_positions(messages: Sequence[NewMessage]) -> list[int]:
    """The positions of the messages :func:`publish_plain_messages` can write together:
    plain ones, each id's first."""
    positions: list[int] = []
    ids: set[str] = set()
    for position, message in enumerate(messages):
        if is_plain_message(message) and message.id not in ids:
            positions.append(position)
        ids.add(message.id)
    return positions


async def publish_plain_messages(
    session: Session,
    q: Queries,
    environment: str,
    messages: Sequence[NewMessage],
    now_us: int,
    claimed_until: int | None,
) -> list[PublishOutcome] | None:
    """Publish plain messages with distinct ids in one statement (autocommitted
    outside a transaction), all or nothing: ``None`` (nothing written) if one's id is
    stored already; ``UniqueViolation`` if an id or a delivery run id was taken
    meanwhile or before.

    The statement writes what :func:`publish_plain_message` writes, for each
    message: the message with its sequence, its delivery runs (their
    ``run.created`` implied by the row), a delivery request (event and outbox row)
    for each delivery that asks for one, and one wakeup for listening workers. The
    messages travel as one JSON array of positional rows, the payload as a JSON
    string of its text so the json column keeps it exactly as written; the
    deliveries as another, each naming its message by position.
    """
    params = plain_batch_params(environment, messages, now_us, claimed_until)
    rows = await session.fetch(q["publish_plain_messages"], params)
    sequences = {row["message_id"]: int(row["sequence"]) for row in rows if row["run_id"] is None}
    if len(sequences) != len(messages):
        return None
    requested = {row["run_id"]: bool(row["requested"]) for row in rows if row["run_id"] is not None}
    outcomes = []
    for message in messages:
        sequence = sequences[message.id]
        runs, outbox = _outcome_runs(environment, message, sequence, now_us, requested)
        stored_now = stored_message(message, sequence, now_us)
        outcomes.append(PublishOutcome(stored_now, duplicate=False, runs=runs, outbox=outbox))
    return outcomes


async def _publish(
    session: Session,
    q: Queries,
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
        held = await session.fetch(q["get_live_deduplication_entry"], dedup)
        if held:
            return await _duplicate(session, q, environment, message_from_row(held[0]))
    scope = {"environment": environment, "id": message.id}
    # Insert first: a stored id (or one a concurrent publish is writing, waited for)
    # makes the insert a no-op, and only then is the stored message read.
    inserted = await session.fetch(
        q["insert_message"], message_params(environment, message, now_us)
    )
    if not inserted:
        (existing,) = await session.fetch(q["get_message"], scope)
        check_reuse(message, existing["envelope"])
        return await _duplicate(session, q, environment, message_from_row(existing))
    sequence = int(inserted[0]["sequence"])
    if dedup is not None and not await session.fetch(q["claim_deduplication_key"], dedup):
        # A concurrent publish of the key committed after the check: take this
        # message back and answer with that one.
        await session.fetch(q["delete_message"], scope)
        held = await session.fetch(q["get_live_deduplication_entry"], dedup)
        return await _duplicate(session, q, environment, message_from_row(held[0]))
    runs, outbox = await _create_deliveries(
        session, q, environment, message, sequence, now_us, claimed_until
    )
    return PublishOutcome(
        stored_message(message, sequence, now_us), duplicate=False, runs=runs, outbox=outbox
    )


async def _create_deliveries(
    session: Session,
    q: Queries,
    environment: str,
    message: NewMessage,
    sequence: int,
    now_us: int,
    claimed_until: int | None,
) -> tuple[list[Run], tuple[OutboxMessage, ...]]:
    """One statement: the runs, and the delivery requests of those claimable at once."""
    if not message.deliveries:
        return [], ()
    params = {
        **_delivery_params(environment, message, now_us, claimed_until),
        "sequence": sequence,
        "now": now_us,
    }
    rows = await session.fetch(q["insert_deliveries"], params)
    requested = {row["id"]: bool(row["requested"]) for row in rows}
    for delivery in message.deliveries:
        if delivery.run_id not in requested:
            raise taken_run_id(delivery.run_id)
    return _outcome_runs(environment, message, sequence, now_us, requested)


def plain_batch_params(
    environment: str, messages: Sequence[NewMessage], now_us: int, claimed_until: int | None
) -> dict[str, Any]:
    """Parameters of ``publish_plain_messages``: the messages as one JSON array of
    positional fields (:data:`~.shapes.PUBLISH_MESSAGE`), their deliveries as another
    (:data:`~.shapes.PUBLISH_DELIVERY`)."""
    message_rows: list[list[Any]] = []
    delivery_rows: list[list[Any]] = []
    for position, message in enumerate(messages, start=1):
        message_rows.append(
            [
                message.id,
                message.topic,
                message.payload_json,
                message.attributes,
                message.envelope,
                to_micros(message.window_ends_at),
                message.trace_carrier,
                publish_source(message).to_json(),
            ]
        )
        delivery_rows.extend([position, *delivery_row(d)] for d in message.deliveries)
    return {
        "environment": environment,
        "now": now_us,
        "outbox_claimed_until": claimed_until,
        "channel": WORK_CHANNEL,
        "messages": dumps(message_rows),
        "deliveries": dumps(delivery_rows),
    }


def _delivery_params(
    environment: str, message: NewMessage, now_us: int, claimed_until: int | None
) -> dict[str, Any]:
    """What the delivery statements take besides the message's own parameters."""
    carrier = message.trace_carrier
    return {
        "environment": environment,
        "payload": message.payload_json,
        "source": dumps(publish_source(message).to_json()),
        "trace_carrier": dumps(carrier) if carrier is not None else None,
        "outbox_claimed_until": claimed_until,
        "channel": WORK_CHANNEL,
        "deliveries": dumps([delivery_row(d) for d in message.deliveries]),
    }


def _outcome_runs(
    environment: str,
    message: NewMessage,
    sequence: int,
    now_us: int,
    requested: dict[str, bool],
) -> tuple[list[Run], tuple[OutboxMessage, ...]]:
    """The delivery runs as inserted, and their delivery requests, in delivery order."""
    source_text = dumps(publish_source(message).to_json())
    runs: list[Run] = []
    outbox: list[OutboxMessage] = []
    for delivery in message.deliveries:
        planned = delivery_run(
            environment, message, delivery, sequence, now_us,
            source_text=source_text, requested=requested[delivery.run_id],
        )  # fmt: skip
        run = planned.run
        runs.append(run)
        if planned.requested:
            outbox.append(
                OutboxMessage(
                    id=f"{run.id}.{DELIVERY_REQUEST_SEQUENCE}",
                    run_id=run.id,
                    queue=run.queue,
                    requested_at=run.created_at,
                    trace_carrier=run.trace_carrier,
                    attempts=0,
                )
            )
    return runs, tuple(outbox)


def delivery_row(delivery: NewDelivery) -> list[Any]:
    """One delivery of ``insert_deliveries``' ``deliveries`` parameter
    (:data:`~.shapes.INSERT_DELIVERY`)."""
    return [
        delivery.run_id,
        delivery.subscription,
        delivery.queue,
        delivery.partition_key,
        delivery.mode.value,
        delivery.request_delivery,
        delivery.rate_key,
    ]


async def _duplicate(
    session: Session, q: Queries, environment: str, original: StoredMessage
) -> PublishOutcome:
    """The original's outcome: its message and its deliveries as they are now."""
    rows = await session.fetch(
        q["runs_of_message"], {"environment": environment, "sequence": original.sequence}
    )
    return PublishOutcome(original, duplicate=True, runs=runs_from_rows(rows))
