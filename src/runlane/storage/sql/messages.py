"""Topics on every SQL dialect: what a publish writes, and the rows of messages, dead
letters, subscription counts and halted keys turned into records.

A driver decides how the statements run and lock; the values they write and the
records they return are built here, once, so both drivers hand core the same.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from runlane.ports.storage import (
    HaltedKey,
    NewDelivery,
    NewMessage,
    StoredDeadLetter,
    StoredMessage,
    SubscriptionCounts,
)
from runlane.storage.sql.encoding import DELIVERY_REQUEST_SEQUENCE, dumps, load_carrier, load_json
from runlane.storage.sql.encoding import load_payload as load_payload
from runlane.storage.sql.rows import Row, run_from_row
from runlane.topics.publishing import check_envelope_reuse
from runlane.types.clock import from_micros, to_micros
from runlane.types.errors import ErrorCode, RunlaneError
from runlane.types.runs import Run, RunSource, RunSourceType, RunStatus, SubscriptionMode

#: The message columns a dead-letter row carries beside the run's, by their aliases.
MESSAGE_ALIASES = (
    "message_id",
    "message_topic",
    "message_payload",
    "message_attributes",
    "message_published_at",
    "message_trace_carrier",
)


def message_from_row(row: Row) -> StoredMessage:
    """A ``runlane_messages`` row as a record."""
    carrier = row["trace_carrier"]
    return StoredMessage(
        id=row["id"],
        topic=row["topic"],
        payload=load_payload(row["payload"]),
        attributes=dict(load_json(row["attributes"])),
        published_at=from_micros(row["published_at"]),
        sequence=int(row["sequence"]),
        trace_carrier=load_carrier(carrier) if carrier is not None else None,
    )


def stored_message(message: NewMessage, sequence: int, now_us: int) -> StoredMessage:
    """``message`` as storage now holds it, without reading it back."""
    return StoredMessage(
        id=message.id,
        topic=message.topic,
        payload=message.payload,
        attributes=dict(message.attributes),
        published_at=from_micros(now_us),
        sequence=sequence,
        trace_carrier=dict(message.trace_carrier) if message.trace_carrier is not None else None,
    )


def message_params(environment: str, message: NewMessage, now_us: int) -> dict[str, Any]:
    """Parameters of ``insert_message`` (the driver adds the sequence where it draws it)."""
    carrier = message.trace_carrier
    return {
        "environment": environment,
        "id": message.id,
        "topic": message.topic,
        "payload": message.payload_json,
        "attributes": dumps(message.attributes),
        "envelope": message.envelope,
        "published_at": now_us,
        "window_ends_at": to_micros(message.window_ends_at),
        "trace_carrier": dumps(carrier) if carrier is not None else None,
    }


def deduplication_params(environment: str, message: NewMessage, now_us: int) -> dict[str, Any]:
    """Parameters of the deduplication statements for ``message`` (which has a key)."""
    return {
        "environment": environment,
        "topic": message.topic,
        "key": message.deduplication_key,
        "message_id": message.id,
        "published_at": now_us,
        "expires_at": to_micros(message.window_ends_at),
        "now": now_us,
    }


def is_plain_message(message: NewMessage) -> bool:
    """Whether ``message`` has no deduplication key and no delivery that needs a key
    lock: the drivers write such messages beside others in one go."""
    return message.deduplication_key is None and all(
        d.partition_key is None for d in message.deliveries
    )


def check_reuse(message: NewMessage, stored_envelope: str) -> None:
    """A stored message has ``message``'s id: return if it is the same message (a
    duplicate), else ``MESSAGE_ID_CONFLICT``."""
    check_envelope_reuse(message.id, stored_envelope, message.envelope)


def publish_source(message: NewMessage) -> RunSource:
    """The source of ``message``'s delivery runs."""
    return RunSource(type=RunSourceType.PUBLISH, topic=message.topic, message_id=message.id)


@dataclass(frozen=True, slots=True)
class PlannedRun:
    """A delivery run as it is inserted: the record and its row's parameters."""

    run: Run
    params: dict[str, Any]
    requested: bool


def delivery_run(
    environment: str,
    message: NewMessage,
    delivery: NewDelivery,
    sequence: int,
    now_us: int,
    *,
    source_text: str,
    requested: bool,
) -> PlannedRun:
    """The QUEUED delivery run of ``delivery`` (with a delivery request when
    ``requested``), as a record and as the parameters of ``insert_delivery``."""
    now = from_micros(now_us)
    carrier = message.trace_carrier
    # The required fields positionally: a call with more than 15 keyword arguments
    # compiles to one that builds a dict of them first, at several times the cost.
    run = Run(
        delivery.run_id,
        environment,
        delivery.subscription,
        delivery.queue,
        RunStatus.QUEUED,
        message.payload,
        0,
        0,
        now,
        now,
        now,
        DELIVERY_REQUEST_SEQUENCE if requested else 1,
        source=publish_source(message),
        trace_carrier=dict(carrier) if carrier is not None else None,
        partition_key=delivery.partition_key,
        mode=delivery.mode,
        message_sequence=sequence,
        rate_key=delivery.rate_key,
    )
    params = {
        "environment": environment,
        "id": run.id,
        "task_id": run.task_id,
        "queue": run.queue,
        "payload": message.payload_json,
        "now": now_us,
        "event_sequence": run.event_sequence,
        "delivery_requested_at": now_us if requested else None,
        "source": source_text,
        "trace_carrier": dumps(carrier) if carrier is not None else None,
        "partition_key": delivery.partition_key,
        "subscription_mode": delivery.mode.value,
        "message_sequence": sequence,
        "rate_key": delivery.rate_key,
    }
    return PlannedRun(run, params, requested)


def key_params(
    environment: str, delivery: NewDelivery, sequence: int, now_us: int
) -> dict[str, Any]:
    """Parameters of ``delivery_key_is_free``: whether a new delivery of ``delivery``'s
    (subscription, key) at ``sequence`` is claimable at once (5.7.5)."""
    return {
        "environment": environment,
        "task_id": delivery.subscription,
        "partition_key": delivery.partition_key,
        "ordered": delivery.mode is SubscriptionMode.ORDERED,
        "sequence": sequence,
        "now": now_us,
    }


def needs_key_check(delivery: NewDelivery) -> bool:
    """Whether a delivery request for ``delivery`` depends on its key's other deliveries."""
    return (
        delivery.request_delivery
        and delivery.partition_key is not None
        and delivery.mode is not SubscriptionMode.NONE
    )


# -- dead letters ---------------------------------------------------------------------


def dead_letter_cursor(dead_letter: StoredDeadLetter) -> str:
    """The cursor after ``dead_letter``: its dead-letter time and id."""
    run = dead_letter.run
    assert run.dead_lettered_at is not None
    return f"{to_micros(run.dead_lettered_at)}:{run.id}"


def parse_dead_letter_cursor(cursor: str | None) -> tuple[int | None, str | None]:
    """``(dead-lettered at, id)`` of a cursor :func:`dead_letter_cursor` made, or
    ``CONFIGURATION_INVALID``."""
    if cursor is None:
        return None, None
    micros, sep, run_id = cursor.partition(":") if isinstance(cursor, str) else ("", "", "")
    if not sep or not run_id or not micros.isdigit():
        raise RunlaneError(
            ErrorCode.CONFIGURATION_INVALID,
            f"cursor {cursor!r} was not returned by a dead-letter listing; pass back the "
            "next_cursor of the previous page, or none for the first page.",
        )
    return int(micros), run_id


def dead_letter_from_row(row: Row) -> StoredDeadLetter:
    """A ``list_dead_letters`` row: the run's columns, the message's (aliased) and
    ``blocks_key``."""
    run = run_from_row(row)
    carrier = row["message_trace_carrier"]
    message = StoredMessage(
        id=row["message_id"],
        topic=row["message_topic"],
        payload=load_payload(row["message_payload"]),
        attributes=dict(load_json(row["message_attributes"])),
        published_at=from_micros(row["message_published_at"]),
        sequence=int(row["message_sequence"]),
        trace_carrier=load_carrier(carrier) if carrier is not None else None,
    )
    return StoredDeadLetter(run, message, bool(row["blocks_key"]))


def subscription_counts(
    rows: Iterable[Row], subscriptions: Sequence[str]
) -> list[SubscriptionCounts]:
    """``subscription_stats`` rows (task_id, status, n, halted) folded per subscription,
    one record per name asked for, in that order."""
    counts: dict[str, dict[RunStatus, int]] = {name: {} for name in subscriptions}
    halted: dict[str, int] = {}
    for row in rows:
        name = row["task_id"]
        if name not in counts:
            continue
        if row["status"] is None:  # the halted-keys row
            halted[name] = int(row["n"])
        else:
            counts[name][RunStatus(row["status"])] = int(row["n"])
    return [
        SubscriptionCounts(name, counts[name], halted.get(name, 0))
        for name in dict.fromkeys(subscriptions)
    ]


def halted_key_from_row(row: Row) -> HaltedKey:
    """A ``list_halted_keys`` row as a record."""
    return HaltedKey(
        subscription=row["task_id"],
        key=row["partition_key"],
        dead_letter_id=row["id"],
        dead_lettered_at=from_micros(row["dead_lettered_at"]),
        waiting=int(row["waiting"]),
    )


def check_limit(limit: int, what: str) -> None:
    """A page size of 0 or more (the operator API bounds it further)."""
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 0:
        raise RunlaneError(
            ErrorCode.CONFIGURATION_INVALID, f"{what}: limit must be 0 or more, got {limit!r}."
        )
