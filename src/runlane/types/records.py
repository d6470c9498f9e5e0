"""The records core and drivers exchange through the storage protocol: what to create,
how to change a run, and what storage hands back. Plain values; no behaviour."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple

from runlane.types.priorities import DEFAULT_PRIORITY_WINDOW
from runlane.types.rate_limits import RateLimit
from runlane.types.runs import (
    JsonValue,
    Run,
    RunEventType,
    RunFailure,
    RunSource,
    RunStatus,
    SubscriptionMode,
)
from runlane.types.slot_init import slot_init


@slot_init
@dataclass(frozen=True, slots=True)
class NewEvent:
    """An event to append; the driver assigns its sequence number."""

    type: RunEventType
    data: dict[str, Any] = field(default_factory=dict)


@slot_init
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
    #: The run's partition on a queue rate-limited per key ('' for its unkeyed
    #: partition); ``None`` on every other queue.
    rate_key: str | None = None
    #: Append a delivery request (outbox row + ``run.delivery_requested``) with the run.
    request_delivery: bool = False
    #: -10 to 10; higher starts first among due runs of its queue.
    priority: int = 0
    #: Microseconds the run goes ahead of its due time in its queue's claim order
    #: (``runlane.types.priorities.priority_offset``), stored beside ``run_at``.
    priority_offset: int = 0


@slot_init
@dataclass(frozen=True, slots=True)
class NewRunBatch:
    """Plain runs that differ only in id and payload (a bulk trigger's, with every
    option but the payload shared): each shared field once, the ids and payloads as
    parallel lists, and no :class:`NewRun` per run. A plain run has no idempotency
    key, singleton key, delivery request or dependencies; its other fields mean what
    :class:`NewRun`'s do."""

    ids: Sequence[str]
    payloads: Sequence[JsonValue]
    #: ``payloads`` already serialised (the size cap was checked on these texts).
    payload_texts: Sequence[str]
    task_id: str
    queue: str
    status: RunStatus
    run_at: datetime
    source: RunSource
    concurrency_key: str | None = None
    trace_carrier: dict[str, str] | None = None
    rate_key: str | None = None
    priority: int = 0
    priority_offset: int = 0

    def __len__(self) -> int:
        return len(self.ids)


# Without slot_init: it builds stores for a class's own slots only, and this is rare.
@dataclass(frozen=True, slots=True)
class NewWaitingRun(NewRun):
    """A run to create WAITING for other runs of its environment (contract 8.1).

    Storage counts the dependencies already finished at once, in the creating
    transaction. ``request_delivery`` asks for the delivery request when the
    dependencies release the run, if it is due then. A subclass rather than two
    more fields of :class:`NewRun`: every other run is built without them.
    """

    #: The runs it waits for, in the caller's order, without repeats.
    after: tuple[str, ...] = ()
    #: ``"cancel"`` (a dependency that failed or was cancelled cancels the run) or
    #: ``"run"`` (the run becomes due however its dependencies ended).
    on_failure: str = "cancel"


@slot_init
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


@slot_init
@dataclass(frozen=True, slots=True)
class LeaseRequest:
    """Ask to take a run's lease for ``worker_id`` until ``expires_at``."""

    worker_id: str
    expires_at: datetime


@slot_init
@dataclass(frozen=True, slots=True)
class CreateOutcome:
    """The run a create call produced, or the existing owner it returned instead."""

    run: Run
    created: bool
    #: Delivery requests written with the run (claimed for the caller to publish).
    outbox: tuple[OutboxMessage, ...] = ()


@slot_init
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
    #: Deliveries: why the run is dead-lettered, and when (``None`` keeps the stored value).
    dead_letter_reason: str | None = None
    dead_lettered_at: datetime | None = None
    #: Deliveries: the new replay count (``None`` keeps the stored one).
    replays: int | None = None
    #: Deliveries (replay): the retry budget restarts, ``failure_count`` goes back to 0
    #: before ``add_failure`` counts.
    reset_failures: bool = False


@slot_init
@dataclass(frozen=True, slots=True)
class Transition:
    """A compare-and-set write of one run.

    It applies only while the run's ``event_sequence`` equals ``expected_sequence``
    and, when ``lease_token`` is given, the run still holds that lease (fencing).
    ``lease_expired_by`` additionally requires the lease to have expired at that
    time (maintenance recovering a lost worker's run).

    ``progress`` is the settling attempt's last progress report not yet stored: it is
    written in the same transaction as the transition, only if the transition applies
    (its compare-and-set is the fence), so reporting progress costs a settle no write
    of its own.
    """

    run_id: str
    expected_sequence: int
    changes: RunChanges
    events: tuple[NewEvent, ...]
    lease_token: str | None = None
    lease_expired_by: datetime | None = None
    progress: ProgressWrite | None = None


@dataclass(frozen=True, slots=True)
class RunFilter:
    """Which runs a listing returns."""

    statuses: Sequence[RunStatus] = ()
    task_ids: Sequence[str] = ()
    queues: Sequence[str] = ()
    #: Only the members of this group (``rl.trigger_group``).
    group: str | None = None


@dataclass(frozen=True, slots=True)
class NewGroup:
    """A group to create with its member runs and its callback (contract 8.2)."""

    id: str
    task_id: str
    #: The callback: a run ``after`` every member (its ``after`` lists them).
    callback: NewWaitingRun | None


@dataclass(frozen=True, slots=True)
class GroupStatus:
    """A group (``rl.groups.get``): its members counted per status, and its callback.

    ``counts``, ``done`` and ``total`` count members only, never the callback.
    """

    id: str
    task_id: str
    #: How many members the group has.
    total: int
    #: The callback run (``then=``), or ``None``.
    callback_id: str | None
    created_at: datetime
    #: Members per status; statuses with none are left out.
    counts: dict[RunStatus, int]

    @property
    def done(self) -> int:
        """Members that have finished (succeeded, failed or cancelled)."""
        return sum(n for status, n in self.counts.items() if status.is_terminal)

    @property
    def failed(self) -> int:
        """Members that finished without succeeding (failed or cancelled)."""
        return self.done - self.counts.get(RunStatus.SUCCEEDED, 0)


@dataclass(frozen=True, slots=True)
class QueuePolicy:
    """The durable capacity policy of one queue, as storage enforces it."""

    name: str
    concurrency_limit: int | None = None
    #: Seconds a dispatch reservation may sit unclaimed (bounded queues on transport lanes).
    reservation_window: float | None = None
    #: Attempt starts per period of each partition (None: unlimited).
    rate_limit: RateLimit | None = None
    #: Whether each run's rate key is its own partition (else the queue is one).
    rate_keyed: bool = False
    #: Seconds of the queue's priority window: a due run's claim time lies at most this
    #: far after now, which bounds the claim's index range.
    priority_window: float = DEFAULT_PRIORITY_WINDOW


@dataclass(frozen=True, slots=True)
class RateLimitState:
    """The stored token state of one rate-limit partition: its GCRA theoretical
    arrival time (``runlane.model.rate_limiting``), in microseconds since the epoch."""

    queue: str
    rate_key: str
    tat: int
    #: Due runs of the partition when it is a key's, at the time asked (else 0).
    due: int = 0


@dataclass(frozen=True, slots=True)
class QueuePause:
    """A stored pause of one queue: no worker starts its runs until it is resumed."""

    queue: str
    paused_at: datetime
    reason: str | None = None


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


# -- topics (contract 5.12) ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NewDelivery:
    """One delivery run a publish creates: a run whose ``task_id`` is the subscription."""

    run_id: str
    subscription: str
    queue: str
    mode: SubscriptionMode
    #: ``None`` for NONE subscriptions and keyless deliveries.
    partition_key: str | None = None
    #: On a transport lane: append a delivery request if the delivery is claimable at
    #: once (its key free, and for ORDERED at its head); storage applies the key rule.
    request_delivery: bool = False
    #: On a queue rate-limited per key: the message's key for the subscription ('' when
    #: it has none); ``None`` on every other queue.
    rate_key: str | None = None


@dataclass(frozen=True, slots=True)
class NewMessage:
    """A message to publish, with the deliveries its matching subscriptions get."""

    id: str
    topic: str
    payload: JsonValue
    #: ``payload`` already serialised (the size cap was checked on this text).
    payload_json: str
    attributes: dict[str, str]
    #: Topic, payload and attributes as canonical JSON
    #: (:func:`runlane.topics.publishing.canonical_envelope`): a reused id is compared by it.
    envelope: str
    #: The end of the topic's deduplication window for this message: its key is held
    #: until then, and the message row is kept at least until then.
    window_ends_at: datetime
    deduplication_key: str | None = None
    trace_carrier: dict[str, str] | None = None
    #: In subscription registration order.
    deliveries: tuple[NewDelivery, ...] = ()


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """A message as storage holds it."""

    id: str
    topic: str
    payload: JsonValue
    attributes: dict[str, str]
    published_at: datetime
    #: Positive, unique and increasing within the environment (5.7.4).
    sequence: int
    trace_carrier: dict[str, str] | None = None


@dataclass(frozen=True, slots=True)
class PublishOutcome:
    """What one message of a ``publish_messages`` call produced."""

    message: StoredMessage
    #: True: nothing was written; ``message`` and ``runs`` are the original's.
    duplicate: bool
    #: The delivery runs: as created, in the order given; for a duplicate, the
    #: original's deliveries as they are now (by run id).
    runs: list[Run]
    #: Delivery requests written with the runs (claimed when the caller asked).
    outbox: tuple[OutboxMessage, ...] = ()


@dataclass(frozen=True, slots=True)
class DeadLetterFilter:
    """Which dead letters a listing returns; ``None`` filters nothing."""

    topic: str | None = None
    subscription: str | None = None
    partition_key: str | None = None
    #: Only this delivery run (reading one dead letter).
    run_id: str | None = None


@dataclass(frozen=True, slots=True)
class StoredDeadLetter:
    """A DEAD_LETTERED delivery run with its message."""

    run: Run
    message: StoredMessage
    #: An ORDERED key's head: later deliveries of its key wait for it.
    blocks_key: bool


@dataclass(frozen=True, slots=True)
class SubscriptionCounts:
    """A subscription's stored deliveries per status, and its halted keys."""

    subscription: str
    counts: dict[RunStatus, int]
    #: ORDERED keys whose head is dead-lettered (0 for other modes).
    halted_keys: int = 0


@dataclass(frozen=True, slots=True)
class HaltedKey:
    """An ORDERED key whose head is dead-lettered: nothing behind it runs until an
    operator replays or discards that dead letter."""

    subscription: str
    key: str
    #: The head's run id: replay or discard it.
    dead_letter_id: str
    dead_lettered_at: datetime
    #: Unfinished deliveries of the key behind the head.
    waiting: int


class ProgressWrite(NamedTuple):
    """One attempt's latest progress, to store while it still holds its lease.

    ``write_progress`` stores it only while run ``run_id`` is leased with
    ``lease_token`` (unexpired) and on ``attempt``: a worker that lost its lease writes
    nothing. Carried by the :class:`Transition` that settles the attempt, it is stored
    with the transition if that applies. ``data_json`` is the JSON text of the task's
    ``data`` (``None`` when it gave none).

    A named tuple, not a frozen dataclass: one is built for every attempt that reports,
    and a tuple can be built without a Python-level ``__init__``.
    """

    run_id: str
    lease_token: str
    attempt: int
    fraction: float
    message: str | None
    data_json: str | None


@dataclass(frozen=True, slots=True)
class ThroughputRow:
    """One count of the throughput rollup: ``count`` events of ``series`` in ``queue``
    during the period starting at ``period`` (a minute when recorded; wider when read
    back summed over ``bucket_seconds``).

    Series are attempt outcomes (``succeeded``, ``failed``, ``retried``,
    ``cancelled``) and start-latency histogram buckets (``latency_00`` ...), see
    :mod:`runlane.model.throughput`.
    """

    queue: str
    period: datetime
    series: str
    count: int
