"""The row codec: database rows in, core records out.

Both SQL drivers store times as integer microseconds and JSON as text (SQLite) or
jsonb loaded as text (PostgreSQL); rows become core records here, the same way for
both, so both drivers hand core identical values.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from functools import lru_cache
from operator import itemgetter
from typing import Any

from runlane.ports.storage import OutboxMessage, QueuePause, ScheduleState
from runlane.storage.sql.encoding import load_json, load_payload
from runlane.storage.sql.implied import started_event_data
from runlane.types.clock import from_micros
from runlane.types.runs import (
    Lease,
    Page,
    Run,
    RunEvent,
    RunEventType,
    RunFailure,
    RunSource,
    RunStatus,
    SubscriptionMode,
)

#: Bound once: the decoder calls it for every row.
_loads = load_json

#: A database row read by column name (sqlite3.Row, psycopg dict rows), JSON as text.
Row = Mapping[str, Any] | Any

_STATUSES = {status.value: status for status in RunStatus}
_MODES = {mode.value: mode for mode in SubscriptionMode}


#: The ``runs`` columns a run is built from, in the order :class:`RunDecoder` reads them.
RUN_COLUMNS = (
    "id",
    "environment",
    "task_id",
    "queue",
    "status",
    "payload",
    "attempt",
    "failure_count",
    "run_at",
    "created_at",
    "updated_at",
    "event_sequence",
    "source",
    "result",
    "failure",
    "idempotency_key",
    "singleton_key",
    "concurrency_key",
    "trace_carrier",
    "lease_owner",
    "lease_token",
    "lease_expires_at",
    "cancel_reason",
    "partition_key",
    "replays",
    "subscription_mode",
    "message_sequence",
    "dead_letter_reason",
    "dead_lettered_at",
    "rate_key",
    "priority",
)
_BY_NAME: Callable[[Row], tuple[Any, ...]] = itemgetter(*RUN_COLUMNS)


class RunDecoder:
    """Builds runs from ``runs`` rows, sharing the equal immutable values rows repeat.

    Rows decoded together (one claim, one listing page) mostly share their times,
    source and lease: a claim leases every run under one token, and runs created by
    one bulk trigger share their times and source. Each distinct value is decoded
    once per decoder; mutable values (payload, result, trace carrier) never are shared.

    Rows are read by column name (``sqlite3.Row``, dict rows) unless ``columns`` names
    the columns of plain tuple rows (a cursor's description): each row's values then
    come out by position, in one call, with no dict built per row.
    """

    __slots__ = ("_fields", "_leases", "_sources", "_times")

    _fields: Callable[[Row], tuple[Any, ...]]

    def __init__(self, columns: Sequence[str] | None = None) -> None:
        self._times: dict[int, datetime] = {}
        self._sources: dict[str, RunSource] = {}
        self._leases: dict[tuple[str, str, int], Lease] = {}
        self._fields = _BY_NAME if columns is None else _by_position(tuple(columns))

    def time(self, micros: int) -> datetime:
        """``from_micros(micros)``, once per distinct value."""
        moment = self._times.get(micros)
        if moment is None:
            moment = self._times[micros] = from_micros(micros)
        return moment

    def run(self, row: Row) -> Run:
        """Build a :class:`Run` from a ``runs`` row."""
        (
            run_id,
            environment,
            task_id,
            queue,
            status,
            payload,
            attempt,
            failure_count,
            run_at,
            created_at,
            updated_at,
            event_sequence,
            source_text,
            result,
            failure,
            idempotency_key,
            singleton_key,
            concurrency_key,
            carrier,
            lease_owner,
            token,
            lease_expires_at,
            cancel_reason,
            partition_key,
            replays,
            mode,
            message_sequence,
            dead_letter_reason,
            dead_lettered_at,
            rate_key,
            priority,
        ) = self._fields(row)
        time = self.time
        source = self._sources.get(source_text)
        if source is None:
            source = self._sources[source_text] = RunSource.from_json(_loads(source_text))
        lease = None
        if token is not None:
            key = (lease_owner, token, lease_expires_at)
            lease = self._leases.get(key)
            if lease is None:
                lease = self._leases[key] = Lease(lease_owner, token, time(lease_expires_at))
        # Positional, in Run's field order: a call with more than 15 keyword arguments
        # compiles to one that builds a dict of them first, at several times the cost.
        return Run(
            run_id,
            environment,
            task_id,
            queue,
            _STATUSES[status],
            load_payload(payload),
            attempt,
            failure_count,
            time(run_at),
            time(created_at),
            time(updated_at),
            event_sequence,
            source,
            _loads(result) if result is not None else None,
            RunFailure.from_json(_loads(failure)) if failure is not None else None,
            idempotency_key,
            singleton_key,
            concurrency_key,
            carrier,  # its JSON text, decoded when first read (see Run.trace_carrier)
            lease,
            cancel_reason,
            partition_key,
            replays,
            _MODES[mode] if mode is not None else None,
            message_sequence,
            dead_letter_reason,
            time(dead_lettered_at) if dead_lettered_at is not None else None,
            rate_key,
            None,
            priority,
        )


def run_from_row(row: Row) -> Run:
    """Build a :class:`Run` from a ``runs`` row."""
    return RunDecoder().run(row)


def run_page(rows: Sequence[Row], limit: int) -> Page[Run]:
    """One page of a listing that read one row more than ``limit``: the cursor is the
    last id of this page, and there is a next page only when the extra row came back."""
    runs = runs_from_rows(rows[:limit])
    next_cursor = runs[-1].id if len(rows) > limit and runs else None
    return Page(runs, next_cursor)


@lru_cache(maxsize=32)
def _by_position(columns: tuple[str, ...]) -> Callable[[Row], tuple[Any, ...]]:
    """The getter of a tuple row's run fields, once per set of columns (a statement's
    columns never change, and a claim decodes a few rows at a time)."""
    index = {name: i for i, name in enumerate(columns)}
    return itemgetter(*[index[name] for name in RUN_COLUMNS])


def runs_from_rows(rows: Iterable[Row], columns: Sequence[str] | None = None) -> list[Run]:
    """Build :class:`Run` records from ``runs`` rows, decoding shared values once
    (``columns``: the column names of tuple rows, as :class:`RunDecoder` takes them)."""
    decode = RunDecoder(columns).run
    return [decode(row) for row in rows]


def outbox_from_row(row: Row) -> OutboxMessage:
    """Build an :class:`OutboxMessage` from an outbox row."""
    carrier = row["trace_carrier"]
    return OutboxMessage(
        id=row["id"],
        run_id=row["run_id"],
        queue=row["queue"],
        requested_at=from_micros(row["requested_at"]),
        trace_carrier=load_json(carrier) if carrier is not None else None,
        attempts=row["attempts"],
    )


def event_from_row(row: Row) -> RunEvent:
    """Build a :class:`RunEvent` from a ``run_events`` row."""
    return RunEvent(
        run_id=row["run_id"],
        sequence=row["sequence"],
        type=RunEventType(row["type"]),
        occurred_at=from_micros(row["occurred_at"]),
        data=load_json(row["data"]) or {},
    )


def implied_created_event(row: Row) -> RunEvent:
    """The ``run.created`` event a run's row implies, for drivers that do not store it:
    ``run_id``, ``occurred_at`` (creation), ``task_id``, ``queue``, ``first_run_at``
    and ``source`` columns; for a run with dependencies, ``after`` and ``on_failure``."""
    data = {
        "task_id": row["task_id"],
        "queue": row["queue"],
        "run_at": from_micros(row["first_run_at"]).isoformat(),
        "source": load_json(row["source"]),
    }
    if row["on_failure"] is not None:
        after = row["after"]
        data["after"] = load_json(after) if isinstance(after, str) else list(after or ())
        data["on_failure"] = row["on_failure"]
    return RunEvent(
        run_id=row["run_id"],
        sequence=1,
        type=RunEventType.CREATED,
        occurred_at=from_micros(row["occurred_at"]),
        data=data,
    )


def implied_attempt_events(row: Row) -> list[RunEvent]:
    """The ``run.started`` and ``run.succeeded`` events a run's row implies, for drivers
    that do not store them: ``run_id``, ``attempt`` and the ``started_*`` and
    ``succeeded_*`` columns (``NULL`` where the row implies neither). The start is the
    row's latest, so its attempt is the row's; so is the success's."""
    events: list[RunEvent] = []
    run_id, attempt = row["run_id"], row["attempt"]
    if row["started_sequence"] is not None:
        data = started_event_data(attempt, row["started_by"], row["started_lease_expires_at"])
        events.append(
            RunEvent(
                run_id,
                row["started_sequence"],
                RunEventType.STARTED,
                from_micros(row["started_at"]),
                data,
            )
        )
    if row["succeeded_sequence"] is not None:
        events.append(
            RunEvent(
                run_id,
                row["succeeded_sequence"],
                RunEventType.SUCCEEDED,
                from_micros(row["succeeded_at"]),
                {"attempt": attempt},
            )
        )
    return events


def run_events_from_rows(rows: Iterable[Row]) -> list[RunEvent]:
    """A run's history from ``list_run_events`` rows: the stored events, and those the
    run's row (the one with ``implied`` set) implies: ``run.created`` when it has
    ``first_run_at`` (see :func:`implied_created_event`), and its latest start and
    success (:func:`implied_attempt_events`).

    A stored event wins over an implied one of the same sequence: a start is stored once
    its run is to be claimed again, and its columns stay until the next claim.
    """
    stored: list[RunEvent] = []
    implied: list[RunEvent] = []
    for row in rows:
        if not row["implied"]:
            stored.append(event_from_row(row))
            continue
        if row["first_run_at"] is not None:
            implied.append(implied_created_event(row))
        implied += implied_attempt_events(row)
    if not implied:
        return stored
    taken = {event.sequence for event in stored}
    events = stored + [event for event in implied if event.sequence not in taken]
    events.sort(key=_sequence)
    return events


def _sequence(event: RunEvent) -> int:
    return event.sequence


def schedule_states(rows: Iterable[Row]) -> dict[str, ScheduleState]:
    """``runlane_schedules`` rows by schedule id."""
    return {
        row["schedule_id"]: ScheduleState(
            row["schedule_id"],
            from_micros(row["last_slot"]) if row["last_slot"] is not None else None,
            bool(row["paused"]),
            from_micros(row["first_seen"]) if row["first_seen"] is not None else None,
        )
        for row in rows
    }


def queue_pause_from_row(row: Row) -> QueuePause:
    """A ``runlane_queue_pauses`` row."""
    return QueuePause(row["queue"], from_micros(row["paused_at"]), row["reason"])
