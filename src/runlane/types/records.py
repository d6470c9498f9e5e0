"""The records core and drivers exchange through the storage protocol: what to create,
how to change a run, and what storage hands back. Plain values; no behaviour."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from runlane.types.runs import JsonValue, Run, RunEventType, RunFailure, RunSource, RunStatus


@dataclass(frozen=True, slots=True)
class NewEvent:
    """An event to append; the driver assigns its sequence number."""

    type: RunEventType
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class NewRun:
    """A run to create, with the ownership rules it must respect."""

    id: str
    task_id: str
    queue: str
    status: RunStatus
    payload: JsonValue
    #: ``payload`` already serialised (the size cap was checked on this text).
    payload_json: str
    run_at: datetime
    source: RunSource
    idempotency_key: str | None = None
    #: ``None`` with an idempotency key means ownership lasts only while the run is active.
    idempotency_expires_at: datetime | None = None
    singleton_key: str | None = None
    concurrency_key: str | None = None
    trace_carrier: dict[str, str] | None = None
    #: Append a delivery request (outbox row + ``run.delivery_requested``) with the run.
    request_delivery: bool = False


@dataclass(frozen=True, slots=True)
class OutboxMessage:
    """A delivery request waiting to be published as one wakeup."""

    id: str
    run_id: str
    queue: str
    requested_at: datetime
    trace_carrier: dict[str, str] | None
    attempts: int


@dataclass(frozen=True, slots=True)
class OutboxResult:
    """How publishing one outbox message went."""

    id: str
    published: bool
    provider_message_id: str | None = None
    error: dict[str, Any] | None = None
    retry_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class LeaseRequest:
    """Ask to take a run's lease for ``worker_id`` until ``expires_at``."""

    worker_id: str
    expires_at: datetime


@dataclass(frozen=True, slots=True)
class CreateOutcome:
    """The run a create call produced, or the existing owner it returned instead."""

    run: Run
    created: bool
    #: Delivery requests written with the run (claimed for the caller to publish).
    outbox: tuple[OutboxMessage, ...] = ()


@dataclass(frozen=True, slots=True)
class RunChanges:
    """The new values a transition writes; the lease is always cleared unless kept."""

    status: RunStatus
    run_at: datetime | None = None
    result: JsonValue = None
    failure: RunFailure | None = None
    cancel_reason: str | None = None
    #: Count one more failed attempt (drives the retry budget).
    add_failure: bool = False
    #: Keep the current lease (cancellation requested on a running run).
    keep_lease: bool = False


@dataclass(frozen=True, slots=True)
class Transition:
    """A compare-and-set write of one run.

    It applies only while the run's ``event_sequence`` equals ``expected_sequence``
    and, when ``lease_token`` is given, the run still holds that lease (fencing).
    ``lease_expired_by`` additionally requires the lease to have expired at that
    time (maintenance recovering a lost worker's run).
    """

    run_id: str
    expected_sequence: int
    changes: RunChanges
    events: tuple[NewEvent, ...]
    lease_token: str | None = None
    lease_expired_by: datetime | None = None


@dataclass(frozen=True, slots=True)
class RunFilter:
    """Which runs a listing returns."""

    statuses: Sequence[RunStatus] = ()
    task_ids: Sequence[str] = ()
    queues: Sequence[str] = ()


@dataclass(frozen=True, slots=True)
class QueuePolicy:
    """The durable capacity policy of one queue, as storage enforces it."""

    name: str
    concurrency_limit: int | None = None
    #: Seconds a dispatch reservation may sit unclaimed (bounded queues on transport lanes).
    reservation_window: float | None = None


@dataclass(frozen=True, slots=True)
class ScheduleState:
    """What storage remembers of a schedule: its newest materialised slot, its pause
    flag, and when a tick first saw it (no slot before that point ever fires)."""

    schedule_id: str
    last_slot: datetime | None
    paused: bool
    first_seen: datetime | None = None


@dataclass(frozen=True, slots=True)
class ScheduleOccurrence:
    """One slot of one schedule and the run it becomes if the slot is still unclaimed."""

    schedule_id: str
    slot: datetime
    run: NewRun
