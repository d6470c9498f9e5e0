"""Run records and the vocabulary around them (statuses, events, sources, pages)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, Generic, TypeVar

from runlane.types.carriers import load_carrier
from runlane.types.slot_init import slot_init

JsonValue = Any
"""A JSON-serialisable value (dict, list, str, int, float, bool or None)."""


class RunStatus(StrEnum):
    """Where a run is in its lifecycle."""

    QUEUED = "queued"
    #: Triggered ``after`` other runs that have not all finished yet (contract 8.1):
    #: never claimed; it becomes due, or is cancelled, when its last dependency ends.
    WAITING = "waiting"
    SCHEDULED = "scheduled"
    RUNNING = "running"
    RETRYING = "retrying"
    RELEASED = "released"
    CANCELLATION_REQUESTED = "cancellation_requested"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    #: A delivery whose retries are spent (or that its handler refused): parked for an
    #: operator to replay or discard. Not terminal, not claimable, holds no lease.
    DEAD_LETTERED = "dead_lettered"
    #: A dead letter an operator gave up on: terminal.
    DISCARDED = "discarded"

    @property
    def is_terminal(self) -> bool:
        """Terminal runs accept no further events."""
        return self in TERMINAL_STATUSES

    @property
    def is_active(self) -> bool:
        """Active runs may still change."""
        return self not in TERMINAL_STATUSES


TERMINAL_STATUSES = frozenset(
    {RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.DISCARDED}
)
ACTIVE_STATUSES = frozenset(RunStatus) - TERMINAL_STATUSES
#: Statuses a worker may claim once ``run_at`` has passed.
CLAIMABLE_STATUSES = frozenset(
    {RunStatus.QUEUED, RunStatus.SCHEDULED, RunStatus.RETRYING, RunStatus.RELEASED}
)
#: Statuses in which a worker holds the run's lease.
LEASED_STATUSES = frozenset({RunStatus.RUNNING, RunStatus.CANCELLATION_REQUESTED})
#: An ORDERED key's head is its delivery of lowest sequence in one of these (5.7).
UNFINISHED_STATUSES = ACTIVE_STATUSES


class SubscriptionMode(StrEnum):
    """How a subscription's deliveries of one key may run (contract 5.7).

    ``NONE``: in parallel. ``EXCLUSIVE``: at most one per key holds a lease.
    ``ORDERED``: one per key at a time, in publish order; a dead-lettered head
    halts its key until an operator replays or discards it. Stored on each
    delivery run at publish, so a later change applies to later messages.
    """

    NONE = "none"
    EXCLUSIVE = "exclusive"
    ORDERED = "ordered"


class RunEventType(StrEnum):
    """The durable history vocabulary; every transition appends one or more of these."""

    CREATED = "run.created"
    DELIVERY_REQUESTED = "run.delivery_requested"
    STARTED = "run.started"
    SUCCEEDED = "run.succeeded"
    FAILED = "run.failed"
    RETRY_SCHEDULED = "run.retry_scheduled"
    RELEASED = "run.released"
    CANCELLATION_REQUESTED = "run.cancellation_requested"
    CANCELLED = "run.cancelled"
    LEASE_EXPIRED = "run.lease_expired"
    DEAD_LETTERED = "run.dead_lettered"
    REPLAYED = "run.replayed"
    DISCARDED = "run.discarded"
    #: A waiting run's dependencies have all finished and it is due (contract 8.1).
    DEPENDENCIES_MET = "run.dependencies_met"


class RunSourceType(StrEnum):
    """What created a run."""

    TRIGGER = "trigger"
    RUN_NOW = "run_now"
    SCHEDULE = "schedule"
    RERUN = "rerun"
    MANUAL_RETRY = "manual_retry"
    PUBLISH = "publish"


@dataclass(frozen=True, slots=True)
class RunSource:
    """Where a run came from: a trigger, a schedule occurrence, another run, or a
    published message (``topic`` and ``message_id``)."""

    type: RunSourceType = RunSourceType.TRIGGER
    run_id: str | None = None
    schedule_id: str | None = None
    occurs_at: datetime | None = None
    topic: str | None = None
    message_id: str | None = None

    def to_json(self) -> dict[str, Any]:
        """Storage form."""
        data: dict[str, Any] = {"type": self.type.value}
        if self.run_id is not None:
            data["run_id"] = self.run_id
        if self.schedule_id is not None:
            data["schedule_id"] = self.schedule_id
        if self.occurs_at is not None:
            data["occurs_at"] = self.occurs_at.isoformat()
        if self.topic is not None:
            data["topic"] = self.topic
        if self.message_id is not None:
            data["message_id"] = self.message_id
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunSource:
        """Inverse of :meth:`to_json`."""
        occurs_at = data.get("occurs_at")
        return cls(
            type=RunSourceType(data.get("type", "trigger")),
            run_id=data.get("run_id"),
            schedule_id=data.get("schedule_id"),
            occurs_at=datetime.fromisoformat(occurs_at) if occurs_at else None,
            topic=data.get("topic"),
            message_id=data.get("message_id"),
        )


@dataclass(frozen=True, slots=True)
class RunFailure:
    """A sanitised failure stored on a run: code and message safe to show, detail in meta."""

    code: str
    message: str
    retryable: bool
    meta: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """Storage form."""
        return {
            "code": self.code,
            "message": self.message,
            "retryable": self.retryable,
            "meta": self.meta,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunFailure:
        """Inverse of :meth:`to_json`."""
        return cls(
            code=str(data["code"]),
            message=str(data["message"]),
            retryable=bool(data.get("retryable", False)),
            meta=dict(data.get("meta") or {}),
        )


@slot_init
@dataclass(frozen=True, slots=True)
class Lease:
    """Who holds a run and until when; ``token`` fences writes from lost owners."""

    owner: str
    token: str
    expires_at: datetime


@dataclass(frozen=True, slots=True)
class RunProgress:
    """How far a run's latest reporting attempt got, as its task last said.

    ``fraction`` is in [0, 1]; ``message`` and ``data`` are what the task passed
    (``None`` when it passed none); ``attempt`` is the attempt that reported it and
    ``updated_at`` when storage took the value. It stays after the run finishes.
    """

    fraction: float
    message: str | None
    data: JsonValue
    attempt: int
    updated_at: datetime


@slot_init
@dataclass(frozen=True, slots=True)
class Run:
    """The materialised state of one run, as storage holds it."""

    id: str
    environment: str
    task_id: str
    queue: str
    status: RunStatus
    payload: JsonValue
    attempt: int
    failure_count: int
    run_at: datetime
    created_at: datetime
    updated_at: datetime
    event_sequence: int
    source: RunSource = field(default_factory=RunSource)
    result: JsonValue = None
    failure: RunFailure | None = None
    idempotency_key: str | None = None
    singleton_key: str | None = None
    concurrency_key: str | None = None
    trace_carrier: dict[str, str] | None = None
    lease: Lease | None = None
    cancel_reason: str | None = None
    #: Deliveries only: the subscription's key for this message (``None``: keyless).
    partition_key: str | None = None
    #: Deliveries only: how often an operator replayed this dead letter.
    replays: int = 0
    #: Deliveries only: the subscription's mode when the message was published
    #: (``None`` for task runs).
    mode: SubscriptionMode | None = None
    #: Deliveries only: the message's sequence (its place in its key's order).
    message_sequence: int | None = None
    #: Deliveries only: why and when the run was last dead-lettered.
    dead_letter_reason: str | None = None
    dead_lettered_at: datetime | None = None
    #: On a queue rate-limited per key: the run's partition ('' when triggered without
    #: a ``rate_key``); ``None`` on every other queue.
    rate_key: str | None = None
    #: The latest progress the task reported (``ctx.progress``), or ``None`` before the
    #: first report. Read by ``rl.runs`` (``get``, ``list``, ``wait``); runs returned by
    #: producing and executing calls leave it ``None``.
    progress: RunProgress | None = None
    #: Higher starts first among due runs of its queue (-10 to 10, SPEC-flow 7.2); kept
    #: by retries, releases, reruns and manual retries.
    priority: int = 0

    @property
    def is_delivery(self) -> bool:
        """Whether the run delivers a published message to a subscription."""
        return self.mode is not None

    @property
    def is_terminal(self) -> bool:
        """Whether the run has finished for good."""
        return self.status.is_terminal


#: ``Run.trace_carrier``'s own slot, behind :class:`_CarrierDecodedOnRead`.
_CARRIER_SLOT: Any = Run.__dict__["trace_carrier"]

stored_trace_carrier: Callable[[Run], dict[str, str] | str | None] = _CARRIER_SLOT.__get__
"""What a run's ``trace_carrier`` slot holds: the carrier, or the JSON text a SQL driver
read it as and nobody has decoded yet (see :class:`_CarrierDecodedOnRead`)."""


class _CarrierDecodedOnRead:
    """``Run.trace_carrier``, in front of its slot: the SQL drivers put the carrier's
    stored JSON text there, and the first read decodes it (a carrier that cannot be
    decoded reads as ``None``) and keeps the mapping in its place. Every read, and so
    equality, ``replace``, ``repr`` and pickling, sees the mapping.

    A traced worker needs nothing of an unsampled run's carrier but one check of that
    text (``runlane.otel``); decoding it for every claimed run cost about 5,000
    instructions, 1.2 % of a no-op attempt (``bench/bench_instructions.py``).
    """

    __slots__ = ()

    def __get__(self, run: Run | None, owner: type | None = None) -> Any:
        if run is None:
            return self
        value = _CARRIER_SLOT.__get__(run)
        if type(value) is str or type(value) is bytes:
            value = load_carrier(value)
            _CARRIER_SLOT.__set__(run, value)
        return value

    def __set__(self, run: Run, value: Any) -> None:
        _CARRIER_SLOT.__set__(run, value)


setattr(Run, "trace_carrier", _CarrierDecodedOnRead())  # noqa: B010 (not a plain field store)


@dataclass(frozen=True, slots=True)
class RunEvent:
    """One entry of a run's append-only history."""

    run_id: str
    sequence: int
    type: RunEventType
    occurred_at: datetime
    data: dict[str, Any]


T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    """One page of a listing; pass ``next_cursor`` back to get the next one."""

    data: list[T]
    next_cursor: str | None = None


@dataclass(frozen=True, slots=True)
class QueueStats:
    """Counts for one queue (and, for bounded queues, one concurrency key)."""

    queue: str
    concurrency_key: str | None
    concurrency_limit: int | None
    counts: dict[RunStatus, int]
    occupied: int
    #: Claimable runs whose ``run_at`` has passed (ready now, not merely waiting).
    due: int = 0
    #: The earliest ``run_at`` among the due runs (``None`` when none is due).
    oldest_due_at: datetime | None = None
    #: Due runs that a rate limit keeps waiting: more than their partition's tokens now.
    rate_limited: int = 0

    @property
    def waiting(self) -> int:
        """Runs waiting to start (queued, scheduled, retrying, released)."""
        return sum(self.counts.get(status, 0) for status in CLAIMABLE_STATUSES)

    @property
    def running(self) -> int:
        """Runs holding a lease."""
        return sum(self.counts.get(status, 0) for status in LEASED_STATUSES)


@dataclass(frozen=True, slots=True)
class QueueThroughput:
    """Runs of one queue that finished inside a time window, by how they ended."""

    queue: str
    succeeded: int = 0
    failed: int = 0
    cancelled: int = 0


@dataclass(frozen=True, slots=True)
class ThroughputPoint:
    """One bar of a throughput chart: attempts that ended in the period from ``at``
    (``succeeded``, ``failed``, ``retried``, ``cancelled``), how many started, and the
    start latency (ms from due to started) that half and 95 % of them stayed within
    (``None`` with no starts)."""

    at: datetime
    succeeded: int = 0
    failed: int = 0
    retried: int = 0
    cancelled: int = 0
    started: int = 0
    latency_p50_ms: float | None = None
    latency_p95_ms: float | None = None


@dataclass(frozen=True, slots=True)
class ThroughputSeries:
    """Throughput of one queue (or every queue, ``queue=None``) over ``window``
    (``"1h"`` or ``"1d"``), one point per ``bucket_seconds``, oldest first, and the
    whole window in ``total`` (its ``at`` is the window's start)."""

    queue: str | None
    window: str
    bucket_seconds: int
    points: list[ThroughputPoint]
    total: ThroughputPoint


@dataclass(slots=True)
class TickReport:
    """What one maintenance pass did, duty by duty.

    ``failures`` counts what failed, by duty name (see
    ``runlane.core.maintenance.DUTIES``): a duty that raised counts once, and
    each schedule that could not be materialised counts once under
    ``"schedules"``. Failures are logged with their traceback; the other duties
    (and schedules) of the pass still run.
    """

    leases_recovered: int = 0
    cancellations_finished: int = 0
    idempotency_keys_released: int = 0
    runs_pruned: int = 0
    schedules_materialized: int = 0
    reservations_expired: int = 0
    deliveries_requested: int = 0
    outbox_published: int = 0
    outbox_failed: int = 0
    deduplication_keys_released: int = 0
    #: Hand-off offers of workers that are gone, removed (PostgreSQL).
    offers_removed: int = 0
    #: Waiting runs whose dependencies had all finished, settled by the safety net
    #: (zero unless a release was missed).
    waiting_runs_settled: int = 0
    failures: dict[str, int] = field(default_factory=dict)

    def total(self) -> int:
        """How many things the pass changed in all."""
        return (
            self.leases_recovered
            + self.cancellations_finished
            + self.idempotency_keys_released
            + self.runs_pruned
            + self.schedules_materialized
            + self.reservations_expired
            + self.deliveries_requested
            + self.outbox_published
            + self.deduplication_keys_released
            + self.offers_removed
            + self.waiting_runs_settled
        )
