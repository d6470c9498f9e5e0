"""The storage protocol: the atomic operations core asks a driver for.

Core never hands a driver SQL. It asks for whole operations (create runs with
their ownership rows, claim due runs under a lease, apply a fenced transition,
...) and a driver performs each one atomically. Every driver must pass the
conformance suite in :mod:`runlane.testing.conformance`.

All times cross this boundary as aware UTC datetimes; drivers choose their own
storage format.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from runlane.types.clock import Clock
from runlane.types.records import (
    CreateOutcome as CreateOutcome,
)
from runlane.types.records import (
    DeadLetterFilter as DeadLetterFilter,
)
from runlane.types.records import (
    GroupStatus as GroupStatus,
)
from runlane.types.records import (
    HaltedKey as HaltedKey,
)
from runlane.types.records import (
    LeaseRequest as LeaseRequest,
)
from runlane.types.records import (
    NewDelivery as NewDelivery,
)
from runlane.types.records import (
    NewEvent as NewEvent,
)
from runlane.types.records import (
    NewGroup as NewGroup,
)
from runlane.types.records import (
    NewMessage as NewMessage,
)
from runlane.types.records import (
    NewRun as NewRun,
)
from runlane.types.records import (
    NewRunBatch as NewRunBatch,
)
from runlane.types.records import (
    NewWaitingRun as NewWaitingRun,
)
from runlane.types.records import (
    OutboxMessage as OutboxMessage,
)
from runlane.types.records import (
    OutboxResult as OutboxResult,
)
from runlane.types.records import (
    ProgressWrite as ProgressWrite,
)
from runlane.types.records import (
    PublishOutcome as PublishOutcome,
)
from runlane.types.records import (
    QueuePause as QueuePause,
)
from runlane.types.records import (
    QueuePolicy as QueuePolicy,
)
from runlane.types.records import (
    RateLimitState as RateLimitState,
)
from runlane.types.records import (
    RunChanges as RunChanges,
)
from runlane.types.records import (
    RunFilter as RunFilter,
)
from runlane.types.records import (
    ScheduleOccurrence as ScheduleOccurrence,
)
from runlane.types.records import (
    ScheduleState as ScheduleState,
)
from runlane.types.records import (
    StoredDeadLetter as StoredDeadLetter,
)
from runlane.types.records import (
    StoredMessage as StoredMessage,
)
from runlane.types.records import (
    SubscriptionCounts as SubscriptionCounts,
)
from runlane.types.records import (
    ThroughputRow as ThroughputRow,
)
from runlane.types.records import (
    Transition as Transition,
)
from runlane.types.runs import (
    Page,
    QueueStats,
    Run,
    RunEvent,
    RunProgress,
    RunStatus,
)


@dataclass(frozen=True, slots=True)
class StorageCapabilities:
    """Honest promises a driver makes; core refuses what a driver cannot honour.

    Each flag guards an operator operation (``Runlane.require``) that fails with
    ``CAPABILITY_UNSUPPORTED`` on a storage without it. The guarantees every
    driver must keep (leases, the outbox, singleton and queue capacity, schedule
    occurrences) are not flags: the conformance suite holds every driver to them.
    """

    #: Runs and their event histories can be listed and read back (``get_run``,
    #: ``list_runs``, ``get_events``).
    reads_run_history: bool
    #: Finished runs can be deleted (``prune``).
    prunes_runs: bool
    #: Idempotency keys are enforced and can be released by an operator.
    enforces_idempotency: bool
    #: Topics: the driver stores messages and their deliveries (:class:`StoresMessages`).
    stores_messages: bool = False


@runtime_checkable
class Storage(Protocol):
    """What a storage driver provides. All methods are scoped to one environment."""

    capabilities: StorageCapabilities

    async def open(self) -> None:
        """Connect (and, where the driver does so, create its schema)."""

    async def close(self) -> None:
        """Release connections."""

    async def migrate(self) -> list[str]:
        """Apply pending schema migrations idempotently; return the ones applied."""

    async def create_runs(
        self,
        environment: str,
        runs: Sequence[NewRun],
        now: datetime,
        *,
        lease: LeaseRequest | None = None,
        connection: Any = None,
        outbox_claimed_until: datetime | None = None,
    ) -> list[CreateOutcome]:
        """Create runs atomically with their ``run.created`` events and ownership rows.

        A run whose idempotency key is owned, or whose singleton key has an active
        run, is not created: the outcome carries the owner with ``created=False``.
        With ``lease``, created runs start RUNNING under that lease (``run_now``).
        With ``connection``, the write joins the caller's open transaction.
        With ``outbox_claimed_until``, delivery requests are written already
        claimed by the caller (who publishes them right after commit).
        """

    async def claim_due_runs(
        self,
        environment: str,
        queues: Sequence[QueuePolicy],
        limit: int,
        lease: LeaseRequest,
        now: datetime,
    ) -> list[Run]:
        """Lease up to ``limit`` claimable runs whose ``run_at`` has passed.

        For a bounded queue (``concurrency_limit``), never more runs of one
        (queue, concurrency key) partition hold an active lease than the limit,
        whatever other callers do at the same time. No run is handed to two
        callers. Claimed runs are RUNNING with a fresh lease token and one more
        attempt, with a ``run.started`` event each.
        """

    async def claim_run(
        self,
        environment: str,
        run_id: str,
        lease: LeaseRequest,
        now: datetime,
        *,
        queue: QueuePolicy | None = None,
    ) -> Run | None:
        """Lease one specific run if it is claimable, due now and (for a bounded
        ``queue``) its partition has free capacity; else ``None``."""

    async def heartbeat(
        self, environment: str, run_id: str, lease_token: str, expires_at: datetime, now: datetime
    ) -> RunStatus | None:
        """Extend a held, unexpired lease; return the run's status, or ``None`` if it is lost.

        A lease that has already expired cannot be revived: its capacity may have
        been handed to another run.
        """

    async def apply_transitions(
        self, environment: str, transitions: Sequence[Transition], now: datetime
    ) -> list[bool]:
        """Apply each transition (compare-and-set); ``False`` where its condition failed.

        Storage must then hold exactly what :func:`runlane.model.transitions.project`
        computes, so callers need not read the run back. A transition that carries
        ``progress`` (the settled attempt's last report) stores it in the same
        transaction as the run's progress, stamped ``now``, if and only if the
        transition applied (its compare-and-set is the fence: no lease is checked),
        replacing the stored value unless that one is of a later attempt.
        """

    async def get_run(self, environment: str, run_id: str) -> Run | None:
        """Read one run."""

    async def list_runs(
        self, environment: str, run_filter: RunFilter, limit: int, cursor: str | None
    ) -> Page[Run]:
        """List runs newest first, ``limit`` at a time."""

    async def get_runs(self, environment: str, run_ids: Sequence[str]) -> list[Run]:
        """Read the runs among ``run_ids`` that exist, in no particular order (the
        waiters of ``rl.runs.wait`` re-read theirs in one call)."""

    async def write_progress(
        self, environment: str, writes: Sequence[ProgressWrite], now: datetime
    ) -> int:
        """Store each attempt's latest progress, replacing the run's previous value;
        return how many were stored.

        A value is stored only while its run is RUNNING or CANCELLATION_REQUESTED
        under the write's ``lease_token`` and ``attempt``, with a lease unexpired at
        ``now`` (fencing); others are dropped. A run keeps its value after it ends,
        until it is pruned.
        """

    async def get_progress(
        self, environment: str, run_ids: Sequence[str]
    ) -> dict[str, RunProgress]:
        """The stored progress of the runs among ``run_ids`` that have one, by run id;
        ``updated_at`` is the ``now`` of the write that stored it."""

    async def list_run_events(self, environment: str, run_id: str) -> list[RunEvent]:
        """A run's history, oldest first."""

    async def list_expired_leases(self, environment: str, now: datetime, limit: int) -> list[Run]:
        """Runs whose lease expired before ``now``, for maintenance to recover."""

    async def release_expired_idempotency_keys(self, environment: str, now: datetime) -> int:
        """Drop idempotency ownership whose retention ended; return how many."""

    async def reset_idempotency_key(self, environment: str, task_id: str, key: str) -> bool:
        """Drop one key's ownership; return whether there was one."""

    async def prune_runs(
        self,
        environment: str,
        older_than: datetime,
        statuses: Sequence[RunStatus],
        limit: int,
    ) -> int:
        """Delete up to ``limit`` terminal runs last updated before ``older_than``, with
        every row that belongs to them (events, idempotency ownership, outbox rows,
        schedule occurrences)."""

    async def queue_stats(
        self, environment: str, queues: Sequence[QueuePolicy], now: datetime
    ) -> list[QueueStats]:
        """Counts per queue (and per concurrency key on bounded queues), with the
        capacity held at ``now``: unexpired leases plus unexpired dispatch reservations."""

    async def count_finished_runs(
        self, environment: str, since: datetime
    ) -> dict[str, dict[RunStatus, int]]:
        """Finished runs (succeeded, failed, cancelled) last updated at or after ``since``,
        per queue and status; queues and statuses with none are left out."""

    async def record_throughput(
        self, environment: str, rows: Sequence[ThroughputRow], older_than: datetime
    ) -> None:
        """Add each row's ``count`` to the rollup's count of its (queue, minute, series),
        whatever other writers add at the same time; then drop the rollup's minutes
        before ``older_than``."""

    async def read_throughput(
        self, environment: str, since: datetime, bucket_seconds: int, queue: str | None
    ) -> list[ThroughputRow]:
        """The rollup's counts of minutes at or after ``since``, summed per series and
        per period of ``bucket_seconds`` counted from ``since`` (a row's ``period`` is
        its start), for ``queue`` or, with ``None``, every queue together (``queue``
        ``""``). Reads a range of the rollup's keys, however many runs there are."""

    async def request_due_deliveries(
        self, environment: str, queues: Sequence[QueuePolicy], now: datetime, limit: int
    ) -> int:
        """Append delivery requests for due runs that have none; return how many.

        A bounded queue gets requests only within free capacity, each holding a
        dispatch reservation for the queue's ``reservation_window``.
        """

    async def expire_dispatch_reservations(self, environment: str, now: datetime) -> int:
        """Free reservations that were not claimed in time; their runs get re-requested."""

    async def claim_outbox(
        self, environment: str, now: datetime, limit: int, claimed_until: datetime
    ) -> list[OutboxMessage]:
        """Claim publishable outbox messages (pending, failed and due, or claim expired)."""

    async def settle_outbox(
        self, environment: str, results: Sequence[OutboxResult], now: datetime
    ) -> None:
        """Mark claimed messages published, or failed with their next attempt time."""

    async def outbox_backlog(self, environment: str) -> dict[str, int]:
        """Delivery requests not yet published (pending, claimed or failed), per queue;
        queues with none are left out."""

    async def hold_maintenance_lead(
        self, environment: str, holder: str, now: datetime, ttl: float
    ) -> bool:
        """Take or keep the environment's maintenance leadership for ``holder``.

        True while ``holder`` leads: one holder per environment across every process
        on the store. The holder keeps the lead by calling again within ``ttl``
        seconds; it passes to another contender once the holder stopped renewing
        for ``ttl`` or its storage session ended, whichever the driver detects
        (SQLite: a lease row that expires; PostgreSQL: an advisory lock that lives
        as long as the holder's connection).
        """

    async def release_maintenance_lead(self, environment: str, holder: str) -> None:
        """Give up the lead if ``holder`` has it, so another contender takes it at once."""

    async def pause_queue(
        self, environment: str, queue: str, reason: str | None, now: datetime
    ) -> QueuePause:
        """Store a pause of ``queue`` and return it; a queue already paused keeps its
        first pause (time and reason) and that one is returned."""

    async def resume_queue(self, environment: str, queue: str) -> bool:
        """Drop the pause of ``queue``; return whether there was one.

        The queue's waiting runs lose their delivery requests in the same
        transaction (their wakeups were ignored while it was paused), so the next
        request for due deliveries wakes each of them again.
        """

    async def list_queue_pauses(self, environment: str) -> list[QueuePause]:
        """Every paused queue of the environment, by name."""

    async def list_rate_limit_states(
        self, environment: str, now: datetime | None = None
    ) -> list[RateLimitState]:
        """The token state of every rate-limit partition that has started a run (or,
        on a queue limited per key, has had a run), with, given ``now``, the due runs
        of each key's partition (``due``; 0 for a queue limited as a whole).

        Claims on a queue whose ``QueuePolicy.rate_limit`` is set start runs only with
        a token of their partition and take it in the transaction that leases them
        (``runlane.model.rate_limiting``); ``claim_run`` does the same for one run.
        With ``QueuePolicy.rate_keyed`` each run's ``rate_key`` is its partition, and a
        partition without a token never keeps another's runs from starting.
        """

    async def get_rate_limit_state(self, environment: str, queue: str, rate_key: str) -> int | None:
        """One partition's stored token state (its tat), or None when it has none."""

    async def next_rate_token(
        self, environment: str, queues: Sequence[QueuePolicy], now: datetime
    ) -> datetime | None:
        """The soonest time after ``now`` at which a partition of the rate-limited
        ``queues`` gets a token (on a queue limited per key: a partition with a due run
        then), or None when none is ahead: a worker pacing a backlog claims then."""

    async def defer_delivery(
        self,
        environment: str,
        run_id: str,
        available_at: datetime,
        interval: float,
        now: datetime,
    ) -> bool:
        """Append a delivery request for a waiting run, published at ``available_at``
        (its partition's next token) plus ``interval`` seconds per due run of its queue
        that goes before it, with ``run.delivery_requested``; False when the run is
        not waiting."""

    async def get_schedule_states(self, environment: str) -> dict[str, ScheduleState]:
        """Every schedule's stored state, by schedule id."""

    async def set_schedule_paused(
        self, environment: str, schedule_id: str, paused: bool, now: datetime
    ) -> None:
        """Pause or resume a schedule (the flag survives restarts)."""

    async def mark_schedules_seen(
        self, environment: str, schedule_ids: Sequence[str], now: datetime
    ) -> None:
        """Record ``now`` as each schedule's first-seen point; one already recorded is kept."""

    async def materialize_schedule_occurrences(
        self, environment: str, occurrences: Sequence[ScheduleOccurrence], now: datetime
    ) -> list[Run]:
        """Claim each occurrence by its deterministic id (schedule id, slot) and create its run.

        An occurrence already claimed, by this or any other process, creates
        nothing. Returns the runs created. The schedule's ``last_slot`` moves
        forward to the newest slot passed, claimed or not.
        """


@runtime_checkable
class WorkNotifier(Protocol):
    """Optional: a driver that can wake idle workers (e.g. PostgreSQL LISTEN/NOTIFY).

    Workers still poll on their interval, so a lost notification only costs latency.
    """

    async def wait_for_work(self, environment: str, timeout: float) -> bool:  # noqa: ASYNC109
        """Return True when new runnable work was announced, False after ``timeout``."""


@runtime_checkable
class AnnouncesPauses(Protocol):
    """Optional: a driver that hears, across processes, that a queue was paused or
    resumed (PostgreSQL LISTEN/NOTIFY), so workers read the pauses again at once.

    Workers still read them every poll interval, so a lost announcement only costs
    latency.
    """

    async def listen_for_pauses(self, environment: str, within: float) -> bool:
        """Start hearing pause announcements of ``environment`` (at most ``within``
        seconds to connect); False when it cannot listen now."""

    def pauses_version(self, environment: str) -> object:
        """A value that changes whenever a pause or resume of ``environment`` was
        announced (or announcements may have been missed) since it was last read."""


@runtime_checkable
class KeepsServerTime(Protocol):
    """Optional: a driver whose server's clock, not the host's, is the time of its lane
    (PostgreSQL: many hosts share one server). The runtime runs on ``server_clock``
    unless it was given a clock of its own; the driver keeps it read while open."""

    @property
    def server_clock(self) -> Clock:
        """The server's time on this host (see :class:`runlane.types.clock.ServerClock`)."""
        ...


@runtime_checkable
class AnnouncesFinishedRuns(Protocol):
    """Optional: a driver that can tell waiters, across processes, that runs finished
    (PostgreSQL LISTEN/NOTIFY, the SQLite file wakeup).

    Waiters still re-read on their interval, so a lost announcement only costs latency.
    """

    async def listen_for_finished_runs(self, environment: str, within: float) -> bool:
        """Start hearing announcements for ``environment`` (connecting within ``within``
        seconds) if not yet; whether they are heard now. A waiter listens, then reads."""

    async def wait_for_finished_runs(self, environment: str, timeout: float) -> bool:  # noqa: ASYNC109
        """True when runs of ``environment`` may have finished (maybe before this call);
        False after ``timeout`` seconds or when announcements may have been missed."""


class Standby(Protocol):
    """An idle worker's offer of free slots (see :class:`HandsOff`), open until
    :meth:`HandsOff.stand_down`."""

    @property
    def arrived(self) -> Any:
        """An ``asyncio.Event`` set when runs were handed over, or may have been."""


@runtime_checkable
class HandsOff(Protocol):
    """Optional: idle workers stand by, and a lone trigger of a due run hands it to one.

    The trigger writes the run already leased to the worker (``run.started``
    included) in its own atomic write and tells the worker: the run then starts
    after one write instead of two (the trigger's and a claim's). An offer covers
    only queues without a concurrency limit and runs without keys. Runs handed to a
    worker that dies before starting them are recovered like any expired lease;
    a driver hands nothing to a worker it can tell is gone.
    """

    async def stand_by(
        self,
        environment: str,
        worker_id: str,
        queues: Sequence[str],
        slots: int,
        lease_duration: float,
        start: Callable[[list[Run]], None],
    ) -> Standby | None:
        """Offer ``slots`` slots on ``queues`` (leases of ``lease_duration`` seconds);
        runs handed over go to ``start`` as soon as they are heard of, from the
        event loop. None when hand-offs are unavailable right now (the caller just
        waits)."""

    async def stand_down(self, environment: str, standby: Standby) -> list[Run]:
        """Withdraw ``standby``; returns the runs handed to it that were not given to
        its ``start`` (none are handed over afterwards)."""

    async def remove_dead_offers(self, environment: str) -> int:
        """Remove the offers of workers that are gone (``tick``); returns how many."""


@runtime_checkable
class SettlesAndClaims(Protocol):
    """Optional: apply transitions and claim due runs in one atomic write.

    A busy worker settles the attempts that ended and claims as many runs as
    that frees in one transaction (one commit) instead of two.
    """

    async def apply_transitions_and_claim(
        self,
        environment: str,
        transitions: Sequence[Transition],
        now: datetime,
        queues: Sequence[QueuePolicy],
        limit: int,
        lease: LeaseRequest,
    ) -> tuple[list[bool], list[Run]]:
        """:meth:`Storage.apply_transitions`, then :meth:`Storage.claim_due_runs`, atomically.

        The claim sees the transitions applied: capacity they free is claimable, and
        a run they make due again may be claimed. Returns what each call returns.
        """


@runtime_checkable
class CreatesRunBatches(Protocol):
    """Optional: create plain runs that share everything but id and payload from one
    :class:`NewRunBatch`, without a :class:`NewRun` per run for core to build and the
    driver to take apart again (a bulk trigger with every option but the payload
    shared; core falls back to :meth:`Storage.create_runs` without it)."""

    async def create_run_batch(
        self, environment: str, batch: NewRunBatch, now: datetime, *, connection: Any = None
    ) -> list[Run]:
        """Create every run of ``batch``, in order, as :meth:`Storage.create_runs` would
        create the same runs as :class:`NewRun` records (no lease, no delivery
        request): all or none, with their ``run.created`` events, inside
        ``connection``'s open transaction if given. Returns the runs as stored.

        A batch naming one id twice, or an id that exists, creates nothing and
        raises ``STORAGE_CONFLICT``.
        """


@runtime_checkable
class CreatesLoneRuns(Protocol):
    """Optional: create one run in fewer steps than :meth:`Storage.create_runs` of a
    one-run list (a lone trigger, the most frequent write of a producer)."""

    async def create_lone_run(self, environment: str, new: NewRun, now: datetime) -> CreateOutcome:
        """What ``create_runs(environment, [new], now)`` returns for its one run."""


@runtime_checkable
class StreamsRuns(Protocol):
    """Optional: create the runs of one long bulk call as a stream, in one transaction.

    Core hands the batches over lazily, each validated as the driver asks for it, so
    a driver whose database works beside the process (a server) stores one batch
    while the next is validated and built. A driver whose writes run in the calling
    process gains nothing from it and leaves it out: core then validates every
    payload first and writes batch by batch.
    """

    async def create_run_stream(
        self, environment: str, batches: Iterable[Sequence[NewRun]], now: datetime
    ) -> list[Run]:
        """Create every run of ``batches``, in order, with its ``run.created`` event,
        and announce the due ones, all or none: if anything fails, an error the
        iterator raises included (it propagates unchanged), nothing is written.

        The runs have no idempotency key, singleton key or delivery request.
        """


@runtime_checkable
class StoresMessages(Protocol):
    """Topics (contract 5.12): what a driver with ``capabilities.stores_messages`` adds.

    Delivery runs are runs: claims, leases, transitions, listing and pruning serve
    them through :class:`Storage`. Dead letter, replay and discard are ordinary
    compare-and-set transitions (:meth:`Storage.apply_transitions`, with the
    delivery fields of :class:`RunChanges`).
    """

    async def publish_messages(
        self,
        environment: str,
        messages: Sequence[NewMessage],
        now: datetime,
        *,
        connection: Any = None,
        outbox_claimed_until: datetime | None = None,
    ) -> list[PublishOutcome]:
        """Publish each message, in order, in one transaction.

        Per message: a deduplication key with an entry whose window has not ended is a
        duplicate (the original's outcome, nothing written); else a message id already
        stored is a duplicate when its canonical envelope is equal, and
        ``MESSAGE_ID_CONFLICT`` (the whole call writes nothing) when it is not. Otherwise
        the message is stored with the next sequence of the environment (drawn after the
        locks that make sequence order commit order per (subscription, key)), its
        deduplication entry (an expired one is replaced), and one QUEUED delivery run per
        :class:`NewDelivery` with its ``run.created`` event, plus a delivery request
        where asked and the delivery is claimable. ``connection`` and
        ``outbox_claimed_until`` work as for :meth:`Storage.create_runs`.
        """

    async def list_dead_letters(
        self,
        environment: str,
        dead_letter_filter: DeadLetterFilter,
        limit: int,
        cursor: str | None,
    ) -> Page[StoredDeadLetter]:
        """DEAD_LETTERED deliveries with their messages, oldest dead letter first (then
        by id), ``limit`` at a time; a cursor this method did not return is
        ``CONFIGURATION_INVALID``."""

    async def get_messages(
        self, environment: str, message_ids: Sequence[str]
    ) -> dict[str, StoredMessage]:
        """The stored messages among ``message_ids``, by id (a delivery's handler gets
        its message's attributes, publish time and sequence from here)."""

    async def subscription_stats(
        self, environment: str, subscriptions: Sequence[str]
    ) -> list[SubscriptionCounts]:
        """Deliveries per status of each named subscription (in the order given; one
        with none has empty counts), and its halted keys."""

    async def list_halted_keys(
        self, environment: str, subscription: str, limit: int, cursor: str | None
    ) -> Page[HaltedKey]:
        """ORDERED keys of ``subscription`` whose head is dead-lettered, by key; the
        cursor is the last key of the previous page."""

    async def release_expired_deduplication_keys(self, environment: str, now: datetime) -> int:
        """Drop deduplication entries whose window has ended by ``now``; return how many."""

    async def mark_key_unavailable(self, environment: str, run_id: str, now: datetime) -> bool:
        """``execute_delivery``'s ignore path (5.7.5), after :meth:`Storage.claim_run`
        did not claim a delivery with a key that is due and waiting: clear its delivery
        request (``tick``'s search requests it again once it is claimable, so it is never
        left without a wakeup) and return whether its key is what keeps it waiting (the
        rule of ``claim_run``: EXCLUSIVE, another delivery of its (subscription, key)
        holds an unexpired lease; ORDERED, also an unfinished delivery of the key comes
        before it). Any other run is left alone (``False``)."""


@runtime_checkable
class TracksDependencies(Protocol):
    """Optional: runs that wait for other runs, and groups (contract 8).

    :meth:`Storage.create_runs` creates a :class:`NewWaitingRun` as WAITING with one edge
    per dependency, counting the dependencies already settled at once (succeeded,
    failed, cancelled, discarded or dead-lettered); unknown ids raise
    ``RUN_NOT_FOUND`` and the call writes nothing. Whatever write settles a run's
    last unsettled dependency (:meth:`Storage.apply_transitions` on any path) also,
    in its transaction, makes the run due (QUEUED, or SCHEDULED before its
    ``run_at``; with its delivery request when it asked for one and is due) and
    appends ``run.dependencies_met``, or, under ``on_failure="cancel"`` with a
    dependency that did not succeed, cancels it with reason ``dependency_failed``
    naming that dependency, which settles its own dependents in turn.
    :meth:`Storage.prune_runs` keeps a finished run an unfinished run depends on.
    """

    async def list_dependencies(self, environment: str, run_id: str) -> list[Run]:
        """The runs ``run_id`` was created ``after``, in the order given, as they are now."""

    async def list_dependents(self, environment: str, run_id: str, limit: int) -> list[Run]:
        """Up to ``limit`` runs created ``after`` ``run_id``, by id."""

    async def settle_stranded_waiting_runs(
        self, environment: str, now: datetime, limit: int
    ) -> int:
        """The safety net: release or cancel (as the settle of their last dependency
        would have) up to ``limit`` WAITING runs none of whose dependencies is
        unfinished; return how many. Zero unless something went wrong."""

    async def create_group(
        self,
        environment: str,
        group: NewGroup,
        members: Sequence[NewRun],
        now: datetime,
        *,
        outbox_claimed_until: datetime | None = None,
    ) -> tuple[list[CreateOutcome], Run | None]:
        """Create the members (plain runs with ``group_id``), the group and its
        callback (``group.callback``, a run ``after`` every member) in one transaction;
        returns the members' outcomes in order (with their delivery requests) and the
        callback. ``outbox_claimed_until`` works as for :meth:`Storage.create_runs`."""

    async def get_group(self, environment: str, group_id: str) -> GroupStatus | None:
        """A group with its members counted per status, or ``None``."""
