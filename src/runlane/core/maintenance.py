"""Maintenance duties run by ``tick`` and by workers: each a small named service with
its own defaults, safe to run concurrently, and isolated: one that fails is logged
and counted, the others still run. Workers run them under an elected leader, one
per environment.

Each service receives only what it uses (a :class:`StoreScope`, the task
definitions, the dispatcher, ...), so it can be built and tested on its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, ClassVar, Protocol

from runlane.core.delivering import expire_delivery
from runlane.core.dispatch import Dispatcher
from runlane.core.observing import Observers
from runlane.core.schedule_service import ScheduleMaterializer
from runlane.core.store import StoreScope
from runlane.model.context import Signal
from runlane.model.definitions import TaskDef
from runlane.model.transitions import LeaseExpired, settle_attempt
from runlane.ports.storage import HandsOff, TracksDependencies
from runlane.topics.constants import DEFAULT_SUBSCRIPTION_RETRY
from runlane.types.errors import ErrorCode, RunlaneError
from runlane.types.retry import DEFAULT_RETRY_POLICY, RetryPolicy
from runlane.types.runs import TERMINAL_STATUSES, RunStatus, TickReport

logger = logging.getLogger("runlane.maintenance")

#: Expired leases recovered per storage round trip.
LEASE_RECOVERY_BATCH = 500
#: Finished runs deleted per storage round trip while pruning.
PRUNE_BATCH = 1000
#: Seconds between a worker's maintenance passes (while it leads).
DEFAULT_MAINTENANCE_INTERVAL = 5.0
#: A leader that has not renewed for this many intervals has lost the lead (SQLite's
#: lease row; PostgreSQL's lock ends with the leader's connection instead).
MAINTENANCE_LEAD_INTERVALS = 3


class Duty(Protocol):
    """One maintenance duty: its name in logs and in ``TickReport.failures``, and one
    pass of its work, which writes its counts into the report."""

    @property
    def name(self) -> str:
        """The duty's name in logs and in ``TickReport.failures``."""
        ...

    async def run(self, report: TickReport) -> None:
        """Do one pass of the duty's work and add its counts to ``report``."""
        ...


@dataclass(frozen=True, slots=True)
class ScheduleDuty:
    """Materialises the due slots of every schedule; a schedule that fails is counted
    under ``schedules`` without stopping the others."""

    name: ClassVar[str] = "schedules"
    materializer: ScheduleMaterializer

    async def run(self, report: TickReport) -> None:
        """Create the runs of the due slots."""
        created, failed = await self.materializer.materialize_due()
        report.schedules_materialized += created
        if failed:
            report.failures[self.name] = report.failures.get(self.name, 0) + failed


@dataclass(frozen=True, slots=True)
class ReservationExpiry:
    """Frees dispatch reservations on bounded queues that were never claimed."""

    name: ClassVar[str] = "dispatch_reservations"
    store: StoreScope

    async def run(self, report: TickReport) -> None:
        """Expire the reservations whose window has passed."""
        store = self.store
        report.reservations_expired += await store.storage.expire_dispatch_reservations(
            store.environment, store.now()
        )


@dataclass(frozen=True, slots=True)
class LeaseRecovery:
    """Runs whose worker vanished: the attempt counts as failed (or the cancel
    completes), by the task's retry policy. A delivery retries while its
    subscription's budget lasts and is dead-lettered (``lease_expired``) after."""

    name: ClassVar[str] = "lease_recovery"
    store: StoreScope
    #: Registered tasks by id (their retry policies); unknown tasks use the default.
    tasks: Mapping[str, TaskDef[Any]]
    observers: Observers
    batch_size: int = LEASE_RECOVERY_BATCH
    #: Registered subscriptions' retry policies by name (unknown ones use the
    #: default subscription policy).
    subscription_retries: Mapping[str, RetryPolicy] = field(default_factory=dict)

    async def run(self, report: TickReport) -> None:
        """Recover every expired lease, ``batch_size`` runs per round trip."""
        store = self.store
        while True:
            now = store.now()
            expired = await store.storage.list_expired_leases(
                store.environment, now, self.batch_size
            )
            if not expired:
                return
            transitions = []
            for run in expired:
                if run.mode is not None:
                    retry = self.subscription_retries.get(run.task_id, DEFAULT_SUBSCRIPTION_RETRY)
                    transitions.append(expire_delivery(run, retry, now))
                    continue
                task = self.tasks.get(run.task_id)
                policy = task.retry if task is not None else DEFAULT_RETRY_POLICY
                transitions.append(settle_attempt(run, LeaseExpired(), policy, now))
            applied = await store.storage.apply_transitions(store.environment, transitions, now)
            for run, transition, ok in zip(expired, transitions, applied, strict=True):
                if not ok:
                    continue  # another process recovered it, or its worker came back
                if run.status is RunStatus.CANCELLATION_REQUESTED:
                    report.cancellations_finished += 1
                else:
                    report.leases_recovered += 1
                    if self.observers:
                        self.observers.call("lease_expired", run)
                logger.warning(
                    "run %s: lease of %s expired; now %s",
                    run.id,
                    run.lease.owner if run.lease else "?",
                    transition.changes.status.value,
                    extra={
                        "event": "run.lease_expired",
                        "run_id": run.id,
                        "task_id": run.task_id,
                        "queue": run.queue,
                        "attempt": run.attempt,
                        "worker_id": run.lease.owner if run.lease else None,
                    },
                )
            if len(expired) < self.batch_size:
                return


@dataclass(frozen=True, slots=True)
class DeliveryRequests:
    """Requests wakeups for runs that became due on transport lanes."""

    name: ClassVar[str] = "delivery_requests"
    dispatcher: Dispatcher

    async def run(self, report: TickReport) -> None:
        """Write the delivery requests of the runs now due."""
        report.deliveries_requested += await self.dispatcher.request_due_deliveries()


@dataclass(frozen=True, slots=True)
class OutboxPublish:
    """Publishes the delivery requests waiting in the outbox."""

    name: ClassVar[str] = "outbox_publish"
    dispatcher: Dispatcher

    async def run(self, report: TickReport) -> None:
        """Publish what is pending; failures stay in the outbox for the next pass."""
        published, failed = await self.dispatcher.publish_pending()
        report.outbox_published += published
        report.outbox_failed += failed


@dataclass(frozen=True, slots=True)
class IdempotencyKeyRelease:
    """Releases idempotency keys whose ownership window has ended."""

    name: ClassVar[str] = "idempotency_keys"
    store: StoreScope

    async def run(self, report: TickReport) -> None:
        """Release the expired keys."""
        store = self.store
        report.idempotency_keys_released += await store.storage.release_expired_idempotency_keys(
            store.environment, store.now()
        )


#: Stranded waiting runs one pass settles at most.
STRANDED_WAITING_BATCH = 500


@dataclass(frozen=True, slots=True)
class StrandedWaitingRuns:
    """The safety net of dependencies (contract 8.1): settles WAITING runs whose
    dependencies have all finished. The settle of a run's last dependency releases
    it in the same transaction, so this finds nothing unless something went wrong;
    what it finds is counted (``TickReport.waiting_runs_settled``) so that such a bug
    shows as a figure, not as a stuck run."""

    name: ClassVar[str] = "waiting_runs"
    store: StoreScope
    batch: int = STRANDED_WAITING_BATCH

    async def run(self, report: TickReport) -> None:
        """Settle the stranded waiting runs."""
        store = self.store
        storage = store.storage
        assert isinstance(storage, TracksDependencies)
        report.waiting_runs_settled += await storage.settle_stranded_waiting_runs(
            store.environment, store.now(), self.batch
        )


@dataclass(frozen=True, slots=True)
class DeadOffers:
    """Removes the hand-off offers of workers that are gone (killed, or their listening
    connection lost): no trigger takes them, but each would still look at them."""

    name: ClassVar[str] = "standby_offers"
    store: StoreScope

    async def run(self, report: TickReport) -> None:
        """Remove the offers whose worker is gone."""
        store = self.store
        storage = store.storage
        assert isinstance(storage, HandsOff)
        report.offers_removed += await storage.remove_dead_offers(store.environment)


@dataclass(frozen=True, slots=True)
class DeduplicationKeyRelease:
    """Releases topics' deduplication keys whose window has ended (contract 5.4.3)."""

    name: ClassVar[str] = "deduplication_keys"
    store: StoreScope

    async def run(self, report: TickReport) -> None:
        """Release the expired keys."""
        store = self.store
        released = await store.messages().release_expired_deduplication_keys(
            store.environment, store.now()
        )
        report.deduplication_keys_released += released


@dataclass(frozen=True, slots=True)
class Pruning:
    """Deletes finished runs older than the runtime's retention."""

    name: ClassVar[str] = "pruning"
    store: StoreScope
    #: Seconds a finished run is kept.
    retention: float
    batch_size: int = PRUNE_BATCH

    async def run(self, report: TickReport) -> None:
        """Prune the finished runs past retention."""
        report.runs_pruned += await prune_finished_runs(
            self.store, self.retention, batch_size=self.batch_size
        )


async def prune_finished_runs(
    store: StoreScope,
    older_than_seconds: float,
    statuses: frozenset[RunStatus] = TERMINAL_STATUSES,
    *,
    batch_size: int = PRUNE_BATCH,
) -> int:
    """Delete finished runs last updated more than ``older_than_seconds`` ago,
    ``batch_size`` per round trip."""
    cutoff = store.now() - timedelta(seconds=older_than_seconds)
    total = 0
    ordered = sorted(statuses)
    while True:
        deleted = await store.storage.prune_runs(store.environment, cutoff, ordered, batch_size)
        total += deleted
        if deleted < batch_size:
            return total


def standard_duties(
    *,
    store: StoreScope,
    tasks: Mapping[str, TaskDef[Any]],
    observers: Observers,
    schedules: ScheduleMaterializer,
    dispatcher: Dispatcher | None,
    retention: float | None,
    subscription_retries: Mapping[str, RetryPolicy] | None = None,
) -> tuple[Duty, ...]:
    """Every duty a runtime runs, in the order one pass runs them: the transport
    duties only on a lane with a transport, dead hand-off offers only on a storage
    that hands off, the deduplication keys only on a storage that stores messages,
    pruning only with a retention."""
    duties: list[Duty] = [ScheduleDuty(schedules)]
    if dispatcher is not None:
        duties.append(ReservationExpiry(store))
    duties.append(
        LeaseRecovery(store, tasks, observers, subscription_retries=subscription_retries or {})
    )
    if isinstance(store.storage, TracksDependencies):
        # Before the delivery requests: a run it makes due gets its request this pass.
        duties.append(StrandedWaitingRuns(store))
    if dispatcher is not None:
        duties += [DeliveryRequests(dispatcher), OutboxPublish(dispatcher)]
    duties.append(IdempotencyKeyRelease(store))
    if isinstance(store.storage, HandsOff):
        duties.append(DeadOffers(store))
    if store.storage.capabilities.stores_messages:
        duties.append(DeduplicationKeyRelease(store))
    if retention is not None:
        duties.append(Pruning(store, retention))
    return tuple(duties)


@dataclass(frozen=True, slots=True)
class Maintenance:
    """``tick``: one pass of ``duties`` after ``connect``, reported to ``observers``."""

    duties: tuple[Duty, ...]
    observers: Observers
    connect: Callable[[], Awaitable[None]]

    async def tick(self) -> TickReport:
        """Connect, run every duty once, and tell the observers what the pass did."""
        await self.connect()
        report = await run_maintenance(self.duties)
        if self.observers:
            self.observers.call("ticked", report)
        return report


async def run_maintenance(duties: Sequence[Duty]) -> TickReport:
    """Run every duty once and report what each did.

    A duty that raises is logged (with its traceback) and counted in
    ``report.failures[duty.name]``; the pass goes on with the next one, so one
    bad schedule or a failing publish never stops lease recovery or pruning.
    Storage that is unavailable is not a duty's failure: the pass stops with its
    STORAGE_UNAVAILABLE at once, rather than have each duty wait for the
    connect timeout in turn.
    """
    report = TickReport()
    for duty in duties:
        try:
            await duty.run(report)
        except RunlaneError as error:
            if error.code is ErrorCode.STORAGE_UNAVAILABLE:
                raise
            logger.exception("tick: duty %s failed; the other duties still run", duty.name)
            report.failures[duty.name] = report.failures.get(duty.name, 0) + 1
        except Exception:
            logger.exception("tick: duty %s failed; the other duties still run", duty.name)
            report.failures[duty.name] = report.failures.get(duty.name, 0) + 1
    if report.total() or report.failures:
        logger.info(
            "tick: %s",
            ", ".join(f"{k} {v}" for k, v in _changes(report).items()) or "failures only",
            extra={"event": "tick.finished", **_changes(report), "failures": report.failures},
        )
    return report


async def maintain_while_leading(
    store: StoreScope,
    tick: Callable[[], Awaitable[TickReport]],
    holder: str,
    interval: float,
    stop: Signal,
) -> None:
    """Every ``interval`` seconds until ``stop``: contend for the environment's
    maintenance lead and, while ``holder`` has it, run one pass through ``tick``.

    Many workers run this side by side; only the leader's passes run, so one
    ticker per environment does the work of ``runlane tick``. A failed pass or a
    lost storage connection is logged and tried again at the next interval.
    """
    ttl = interval * MAINTENANCE_LEAD_INTERVALS
    leading = False
    try:
        while not stop.is_set():
            try:
                now_leading = await store.storage.hold_maintenance_lead(
                    store.environment, holder, store.now(), ttl
                )
            except Exception as error:
                logger.warning("%s: maintenance lead not known (%s); trying again", holder, error)
                now_leading = False
            if now_leading != leading:
                logger.info(
                    "%s: %s maintenance of environment %s",
                    holder,
                    "leads" if now_leading else "no longer leads",
                    store.environment,
                )
                leading = now_leading
            if leading:
                # Through the runtime's tick, so observers see the leader's passes as
                # ticks (the pass logs what it changed itself). Its duties fail one by
                # one, counted; a pass that fails whole (storage gone) is tried again.
                try:
                    await tick()
                except Exception as error:
                    logger.warning("%s: maintenance pass failed (%s); trying again", holder, error)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), interval)
    finally:
        if leading:
            # Hand over at once rather than after the lead expires.
            with contextlib.suppress(Exception):
                await store.storage.release_maintenance_lead(store.environment, holder)


def _changes(report: TickReport) -> dict[str, int]:
    """The duties' counts that are not zero, by field name."""
    return {
        name: value
        for name, value in dataclasses.asdict(report).items()
        if name != "failures" and value
    }
