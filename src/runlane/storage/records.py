"""Shared helpers for SQL drivers: named-query files and the run row codec.

Both SQL drivers store times as integer microseconds since the Unix epoch and
JSON as text (SQLite) or jsonb (PostgreSQL); this module turns their rows into
core records the same way, so both drivers hand core identical values.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from importlib import resources
from operator import itemgetter
from typing import Any

from runlane.core.clock import from_micros, to_micros
from runlane.core.payloads import MAX_PAYLOAD_DEPTH, UnreadablePayload
from runlane.storage.protocol import OutboxMessage, QueuePolicy, ScheduleState
from runlane.types.runs import (
    Lease,
    QueueStats,
    Run,
    RunEvent,
    RunEventType,
    RunFailure,
    RunSource,
    RunStatus,
)

#: Sequence number of the ``run.delivery_requested`` event of a run created with one.
DELIVERY_REQUEST_SEQUENCE = 2
#: Seconds a dispatch reservation lasts when a queue policy names no window.
DEFAULT_RESERVATION_WINDOW = 30.0

#: A database row read by column name (sqlite3.Row, psycopg dict rows), JSON as text.
Row = Mapping[str, Any] | Any

_QUERY_HEADER = re.compile(r"^--\s*name:\s*(\w+)\s*$", re.MULTILINE)


def load_queries(package: str, filename: str = "queries.sql") -> dict[str, str]:
    """Load an annotated SQL file: each query starts with a ``-- name: xyz`` line."""
    text = resources.files(package).joinpath(filename).read_text()
    parts = _QUERY_HEADER.split(text)
    queries = {
        name: body.strip().rstrip(";") for name, body in zip(parts[1::2], parts[2::2], strict=True)
    }
    if not queries:
        raise RuntimeError(f"no named queries in {package}/{filename}")
    return queries


def load_migrations(package: str) -> list[tuple[int, str, str]]:
    """``(version, name, sql)`` for every ``NNN_name.sql`` in a migrations package, in order."""
    found = []
    for entry in resources.files(package).iterdir():
        match = re.match(r"^(\d+)_(\w+)\.sql$", entry.name)
        if match:
            found.append((int(match.group(1)), match.group(2), entry.read_text()))
    return sorted(found)


#: One encoder for every call (``json.dumps`` with options builds one per call).
_ENCODE = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def dumps(value: Any) -> str:
    """Compact JSON text."""
    return _ENCODE(value)


def _json(value: str | bytes) -> Any:
    # Drivers hand JSON columns over as text (the PostgreSQL driver loads jsonb as
    # text too): a decoded JSON string would be indistinguishable from JSON text.
    return json.loads(value)


_loads = json.loads


def load_payload(text: str | bytes) -> Any:
    """Decode a stored payload; one that cannot be decoded becomes an
    :class:`UnreadablePayload`, so it fails its own run and never the claim or
    listing that read it (rows written before payloads had a nesting cap may be
    too deep for the stack that reads them)."""
    try:
        return _loads(text)
    except (ValueError, RecursionError) as error:
        reason = (
            f"nested deeper than this process can decode (the cap is {MAX_PAYLOAD_DEPTH})"
            if isinstance(error, RecursionError)
            else "not valid JSON"
        )
        return UnreadablePayload(reason)


def _load_carrier(text: str | bytes) -> Any:
    # A trace carrier is advisory: one that cannot be read is dropped, not fatal.
    try:
        return _loads(text)
    except (ValueError, RecursionError):
        return None


_STATUSES = {status.value: status for status in RunStatus}


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
        if columns is None:
            self._fields = _BY_NAME
        else:
            index = {name: i for i, name in enumerate(columns)}
            positions = [index[name] for name in RUN_COLUMNS]
            self._fields = itemgetter(*positions)

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
        return Run(
            id=run_id,
            environment=environment,
            task_id=task_id,
            queue=queue,
            status=_STATUSES[status],
            payload=load_payload(payload),
            attempt=attempt,
            failure_count=failure_count,
            run_at=time(run_at),
            created_at=time(created_at),
            updated_at=time(updated_at),
            event_sequence=event_sequence,
            source=source,
            result=_loads(result) if result is not None else None,
            failure=RunFailure.from_json(_loads(failure)) if failure is not None else None,
            idempotency_key=idempotency_key,
            singleton_key=singleton_key,
            concurrency_key=concurrency_key,
            trace_carrier=_load_carrier(carrier) if carrier is not None else None,
            lease=lease,
            cancel_reason=cancel_reason,
        )


def run_from_row(row: Row) -> Run:
    """Build a :class:`Run` from a ``runs`` row."""
    return RunDecoder().run(row)


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
        trace_carrier=_json(carrier) if carrier is not None else None,
        attempts=row["attempts"],
    )


def event_from_row(row: Row) -> RunEvent:
    """Build a :class:`RunEvent` from a ``run_events`` row."""
    return RunEvent(
        run_id=row["run_id"],
        sequence=row["sequence"],
        type=RunEventType(row["type"]),
        occurred_at=from_micros(row["occurred_at"]),
        data=_json(row["data"]) or {},
    )


def implied_created_event(row: Row) -> RunEvent:
    """The ``run.created`` event a run's row implies, for drivers that do not store it:
    ``run_id``, ``occurred_at`` (creation), ``task_id``, ``queue``, ``first_run_at``
    and ``source`` columns."""
    return RunEvent(
        run_id=row["run_id"],
        sequence=1,
        type=RunEventType.CREATED,
        occurred_at=from_micros(row["occurred_at"]),
        data={
            "task_id": row["task_id"],
            "queue": row["queue"],
            "run_at": from_micros(row["first_run_at"]).isoformat(),
            "source": _json(row["source"]),
        },
    )


#: One ``queue_stats`` row: queue, concurrency key, status, count, occupying, due,
#: and the earliest due ``run_at`` in microseconds (``None`` when nothing is due).
QueueStatsRow = tuple[str, str | None, str, int, int, int, int | None]


def queue_stats_rows(rows: Iterable[Row]) -> Iterable[QueueStatsRow]:
    """The ``queue_stats`` statement's rows in :data:`QueueStatsRow` order."""
    return (
        (
            r["queue"],
            r["concurrency_key"],
            r["status"],
            r["count"],
            r["occupying"],
            r["due"],
            r["oldest_due"],
        )
        for r in rows
    )


def build_queue_stats(
    queues: Sequence[QueuePolicy], rows: Iterable[QueueStatsRow]
) -> list[QueueStats]:
    """Fold :data:`QueueStatsRow` rows into per-queue stats.

    Unbounded queues fold all keys into one row; bounded queues keep a row per key.
    ``occupying`` counts the runs holding capacity (unexpired lease or reservation);
    ``due`` the claimable runs whose ``run_at`` has passed.
    """
    limits = {q.name: q.concurrency_limit for q in queues}
    counts: dict[tuple[str, str | None], dict[RunStatus, int]] = {
        (q.name, None): {} for q in queues
    }
    occupied: dict[tuple[str, str | None], int] = {}
    due: dict[tuple[str, str | None], int] = {}
    oldest_due: dict[tuple[str, str | None], int] = {}
    for queue_name, key, status, count, occupying, due_count, oldest in rows:
        bucket_key = (queue_name, key if limits.get(queue_name) is not None else None)
        bucket = counts.setdefault(bucket_key, {})
        status_value = RunStatus(status)
        bucket[status_value] = bucket.get(status_value, 0) + int(count)
        occupied[bucket_key] = occupied.get(bucket_key, 0) + int(occupying or 0)
        due[bucket_key] = due.get(bucket_key, 0) + int(due_count or 0)
        if oldest is not None:
            oldest_due[bucket_key] = min(oldest_due.get(bucket_key, int(oldest)), int(oldest))
    stats = []
    for bucket_key, by_status in sorted(
        counts.items(), key=lambda item: (item[0][0], item[0][1] or "")
    ):
        oldest = oldest_due.get(bucket_key)
        stats.append(
            QueueStats(
                bucket_key[0],
                bucket_key[1],
                limits.get(bucket_key[0]),
                by_status,
                occupied.get(bucket_key, 0),
                due=due.get(bucket_key, 0),
                oldest_due_at=from_micros(oldest) if oldest is not None else None,
            )
        )
    return stats


def finished_counts(rows: Iterable[Row]) -> dict[str, dict[RunStatus, int]]:
    """``count_finished_runs`` rows (queue, status, n) folded per queue and status."""
    counts: dict[str, dict[RunStatus, int]] = {}
    for row in rows:
        counts.setdefault(row["queue"], {})[RunStatus(row["status"])] = int(row["n"])
    return counts


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


def micros_or_none(moment: datetime | None) -> int | None:
    """``moment`` in storage microseconds, or ``None``."""
    return to_micros(moment) if moment is not None else None


def owner_holds(status: str, key_expires_at: int | None, now_us: int) -> bool:
    """Whether an idempotency key's owner run still holds the key at ``now_us``.

    Active owners always hold it; failed owners never do; finished owners hold it
    until the key's retention ends (``None``: only while active).
    """
    owner_status = RunStatus(status)
    if owner_status.is_active:
        return True
    if owner_status is RunStatus.FAILED or key_expires_at is None:
        return False
    return key_expires_at > now_us
