"""The runtime: the registry bound to a lane, and every producer and executor call."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import socket
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import Any, TypeVar

from runlane.core.clock import Clock, SystemClock, aware_utc
from runlane.core.context import Signal
from runlane.core.definitions import QueueDef, TaskDef
from runlane.core.delivery import DeliveryResult, execute_delivery
from runlane.core.dispatch import Dispatcher, check_transport_bindings
from runlane.core.durations import Duration, parse_duration, parse_optional_duration
from runlane.core.errors import ErrorCode, RunlaneError, configuration_error
from runlane.core.execution import DEFAULT_LEASE_DURATION, AttemptRunner, LeaseSettings
from runlane.core.ids import (
    new_token,
    validate_identifier,
)
from runlane.core.lane_spec import Lane
from runlane.core.maintenance import (
    DEFAULT_MAINTENANCE_INTERVAL,
    Duty,
    run_maintenance,
    standard_duties,
)
from runlane.core.observing import Observer, Observers
from runlane.core.payloads import DEFAULT_MAX_PAYLOAD_BYTES
from runlane.core.producing import RunWriter, TriggerPlan, plan_trigger
from runlane.core.registry import Registry
from runlane.core.run_operations import IdempotencyKeys, Runs
from runlane.core.schedule_service import ScheduleMaterializer, Schedules
from runlane.core.store import StoreScope
from runlane.core.sync import SyncRunlane
from runlane.core.worker import WorkBell, Worker, WorkerMode
from runlane.transport.protocol import DeliveryMessage
from runlane.types.records import NewRun
from runlane.types.runs import (
    QueueStats,
    QueueThroughput,
    Run,
    RunSource,
    RunSourceType,
    RunStatus,
    TickReport,
)

logger = logging.getLogger("runlane")

DEFAULT_ENVIRONMENT = "default"
_TRIGGERED = RunSource(RunSourceType.TRIGGER)
#: A task's payload type: its schema with ``task(schema=...)``, else ``Any``.
P = TypeVar("P")


def default_worker_id() -> str:
    """``host-pid-random``: unique per process, readable in operator views."""
    host = socket.gethostname().replace(":", "-")[:64] or "host"
    return f"{host}-{os.getpid()}-{new_token()[:6]}"


class Runlane:
    """The runtime: queues and tasks registered against one lane and environment.

    >>> async with Runlane(lane=sqlite_lane("app.db"), queues=[main], tasks=[send]) as rl:
    ...     run = await rl.trigger(send, {"to": "a@example.com"})
    """

    def __init__(
        self,
        *,
        lane: Lane,
        queues: Sequence[QueueDef],
        tasks: Sequence[TaskDef[Any]] | Mapping[str, TaskDef[Any]],
        environment: str = DEFAULT_ENVIRONMENT,
        clock: Clock | None = None,
        worker_id: str | None = None,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
        lease_duration: Duration = DEFAULT_LEASE_DURATION,
        retention: Duration | None = None,
        sync_threads: int = 32,
        dispatch: str = "eager",
        observers: Sequence[Observer] = (),
    ) -> None:
        if not isinstance(lane, Lane):
            raise configuration_error(
                "lane must be built by sqlite_lane(...) or postgres_lane(...)."
            )
        self.registry = Registry(queues, tasks)
        self.environment = validate_identifier(environment, name="environment")
        self.worker_id = validate_identifier(worker_id or default_worker_id(), name="worker_id")
        if (
            isinstance(max_payload_bytes, bool)
            or not isinstance(max_payload_bytes, int)
            or max_payload_bytes < 1
        ):
            raise configuration_error("max_payload_bytes must be a positive whole number.")
        self.max_payload_bytes = max_payload_bytes
        # A schedule whose payload is over the cap would fail at every tick instead.
        for entry, task_def in self.registry.schedules.values():
            entry.validate_for(task_def, max_payload_bytes)
        self.lease_duration = parse_duration(
            lease_duration, name="lease_duration", allow_zero=False
        )
        self.retention = parse_optional_duration(retention, name="retention", allow_zero=False)
        if isinstance(sync_threads, bool) or not isinstance(sync_threads, int) or sync_threads < 1:
            raise configuration_error("sync_threads must be a whole number of at least 1.")
        self._sync_threads = sync_threads
        self._thread_pool: ThreadPoolExecutor | None = None
        self._open = False
        self._open_lock: asyncio.Lock | None = None
        if dispatch not in ("eager", "deferred"):
            raise configuration_error("dispatch must be 'eager' or 'deferred'.")
        self.eager_dispatch = dispatch == "eager"
        #: Metrics, tracing and live output watching this runtime (see runlane.Observer).
        self.observers = Observers(self)
        #: Wakes this process's idle workers when it creates runnable work.
        self.work_bell = WorkBell()
        self.bind_lane(lane, clock or SystemClock())
        self._sync: SyncRunlane | None = None
        # Last, so each observer's ``attached`` sees a fully wired runtime.
        for observer in observers:
            self.observers.add(observer)

    def bind_lane(self, lane: Lane, clock: Clock) -> None:
        """Wire this runtime to ``lane`` and ``clock``: its store scope, dispatcher and
        maintenance duties. The constructor calls it; ``runlane.testing.on_lane`` calls
        it again on a closed runtime to point an app's runtime at a test lane."""
        store = StoreScope(lane.storage, self.environment, clock)
        dispatcher = None
        if lane.transport is not None:
            queues = list(self.registry.queues.values())
            check_transport_bindings(lane.transport, queues)
            dispatcher = Dispatcher(store, lane.transport, queues, self.lease_duration)
        self.lane = lane
        self.storage = lane.storage
        self.clock: Clock = clock
        #: The storage calls of this runtime: its storage, environment and clock.
        self.store = store
        # The attempt runner's settle batcher writes through this lane's store scope.
        self._attempts = AttemptRunner(
            store, self.registry.tasks, self.observers, lambda: self.thread_pool
        )
        self.dispatcher: Dispatcher | None = dispatcher
        self._writer = RunWriter(
            store,
            dispatcher=dispatcher,
            eager_dispatch=self.eager_dispatch,
            opened=self.open,
            on_created=self.work_bell.ring,
        )
        #: The duties of one maintenance pass (``tick``), in order.
        self.duties: tuple[Duty, ...] = standard_duties(
            store=self.store,
            tasks=self.registry.tasks,
            observers=self.observers,
            schedules=ScheduleMaterializer(
                self.store, self.registry.schedules, self, self.observers
            ),
            dispatcher=self.dispatcher,
            retention=self.retention,
        )

        #: Operator calls on this lane's runs and idempotency keys.
        self.runs: Runs = Runs(store, self.registry, self.open, self.create_child_run)
        self.idempotency_keys: IdempotencyKeys = IdempotencyKeys(store, self.registry, self.open)
        #: Listing, pausing and resuming this lane's schedules.
        self.schedules: Schedules = Schedules(store, self.registry.schedules, self.open)

    def __repr__(self) -> str:
        return f"Runlane(environment={self.environment!r}, storage={self.storage!r})"

    def add_observer(self, observer: Observer) -> None:
        """Start calling ``observer``'s hooks (see :class:`runlane.Observer`)."""
        self.observers.add(observer)

    # -- lifecycle -----------------------------------------------------------------

    @property
    def tasks(self) -> Mapping[str, TaskDef[Any]]:
        """Registered tasks by id."""
        return self.registry.tasks

    @property
    def queues(self) -> Mapping[str, QueueDef]:
        """Registered queues by name."""
        return self.registry.queues

    @property
    def thread_pool(self) -> ThreadPoolExecutor:
        """Threads that run sync task functions."""
        if self._thread_pool is None:
            self._thread_pool = ThreadPoolExecutor(
                self._sync_threads, thread_name_prefix="runlane-task"
            )
        return self._thread_pool

    @property
    def is_open(self) -> bool:
        """Whether the lane is connected (by :meth:`open` or the first call that needed it)."""
        return self._open

    async def open(self) -> None:
        """Connect the lane. Safe to call more than once."""
        if self._open:
            return
        if self._open_lock is None:
            self._open_lock = asyncio.Lock()
        async with self._open_lock:
            if not self._open:
                await self.lane.open()
                self._open = True

    async def close(self) -> None:
        """Close the lane (also when only :meth:`migrate` connected it) and the thread pool."""
        self._open = False
        await self.lane.close()
        if self._thread_pool is not None:
            self._thread_pool.shutdown(wait=False)
            self._thread_pool = None

    async def __aenter__(self) -> Runlane:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def migrate(self) -> list[str]:
        """Apply the storage schema idempotently; works before :meth:`open`."""
        return await self.storage.migrate()

    @property
    def sync(self) -> SyncRunlane:
        """The blocking facade for sync apps: ``rl.sync.trigger(...)``."""
        if self._sync is None:
            self._sync = SyncRunlane(self)
        return self._sync

    # -- producing -----------------------------------------------------------------

    async def trigger(
        self,
        task: TaskDef[P] | str,
        payload: P | Mapping[str, Any] | None = None,
        *,
        queue: QueueDef | str | None = None,
        delay: Duration | None = None,
        run_at: datetime | None = None,
        idempotency_key: str | None = None,
        singleton_key: str | None = None,
        concurrency_key: str | None = None,
        trace_carrier: Mapping[str, str] | None = None,
        connection: Any = None,
    ) -> Run:
        """Create a run of ``task``; it has committed when this returns.

        With an owned ``idempotency_key`` or an active ``singleton_key`` the
        existing run is returned instead of a new one.
        """
        new = self.build_new_run(
            task,
            payload,
            queue=queue,
            delay=delay,
            run_at=run_at,
            idempotency_key=idempotency_key,
            singleton_key=singleton_key,
            concurrency_key=concurrency_key,
            trace_carrier=trace_carrier,
            source=_TRIGGERED,
        )
        if self.observers:
            with self.observers.producing(new.task_id, new.queue, 1) as carrier:
                if carrier is not None and new.trace_carrier is None:
                    new = dataclasses.replace(new, trace_carrier=carrier)
                outcome = await self._writer.create_one(new, connection)
                if outcome.created:
                    self.observers.call("triggered", [outcome.run])
                return outcome.run
        return (await self._writer.create_one(new, connection)).run

    async def trigger_many(
        self,
        task: TaskDef[P] | str,
        payloads: Sequence[P | Mapping[str, Any] | None],
        *,
        queue: QueueDef | str | None = None,
        delay: Duration | None = None,
        run_at: datetime | None = None,
        concurrency_key: str | None = None,
        trace_carrier: Mapping[str, str] | None = None,
        connection: Any = None,
    ) -> list[Run]:
        """Create many runs of one task: all payloads are validated first, then
        written in batches of :data:`TRIGGER_BATCH_SIZE`, each atomic, up to
        :data:`TRIGGER_CONCURRENCY` at a time (one after another inside the caller's
        ``connection``). If a batch fails, others may have been written."""
        plan = self.plan_trigger(
            task,
            queue=queue,
            delay=delay,
            run_at=run_at,
            concurrency_key=concurrency_key,
            trace_carrier=trace_carrier,
            source=_TRIGGERED,
        )
        prepared = plan.prepare(payloads)
        if self.observers:
            with self.observers.producing(plan.task.id, plan.queue.name, len(prepared)) as carrier:
                if carrier is not None and plan.trace_carrier is None:
                    plan = dataclasses.replace(plan, trace_carrier=carrier)
                runs = await self._writer.create_planned(plan, prepared, connection)
                self.observers.call("triggered", runs)
                return runs
        return await self._writer.create_planned(plan, prepared, connection)

    def plan_trigger(
        self,
        task: TaskDef[Any] | str,
        *,
        source: RunSource,
        queue: QueueDef | str | None = None,
        delay: Duration | None = None,
        run_at: datetime | None = None,
        idempotency_key: str | None = None,
        singleton_key: str | None = None,
        concurrency_key: str | None = None,
        trace_carrier: Mapping[str, str] | None = None,
    ) -> TriggerPlan:
        """Validate the payload-independent options of a call; nothing is written here."""
        definition = self.registry.resolve_task(task)
        return plan_trigger(
            definition,
            self.registry.queue_for(definition, queue),
            now=self.clock.now(),
            source=source,
            max_payload_bytes=self.max_payload_bytes,
            transport=self.dispatcher is not None,
            delay=delay,
            run_at=run_at,
            idempotency_key=idempotency_key,
            singleton_key=singleton_key,
            concurrency_key=concurrency_key,
            trace_carrier=trace_carrier,
        )

    def build_new_run(
        self,
        task: TaskDef[Any] | str,
        payload: Any,
        *,
        source: RunSource,
        queue: QueueDef | str | None = None,
        delay: Duration | None = None,
        run_at: datetime | None = None,
        idempotency_key: str | None = None,
        singleton_key: str | None = None,
        concurrency_key: str | None = None,
        trace_carrier: Mapping[str, str] | None = None,
    ) -> NewRun:
        """Validate everything about one run to create; nothing is written here."""
        (new,) = self.plan_trigger(
            task,
            source=source,
            queue=queue,
            delay=delay,
            run_at=run_at,
            idempotency_key=idempotency_key,
            singleton_key=singleton_key,
            concurrency_key=concurrency_key,
            trace_carrier=trace_carrier,
        ).new_runs([payload])
        return new

    async def create_child_run(
        self, source: Run, source_type: RunSourceType, queue: QueueDef | str | None
    ) -> Run:
        """A new run of ``source``'s task and payload, linked to it (rerun, manual retry)."""
        new = self.build_new_run(
            source.task_id,
            source.payload,
            queue=queue or source.queue,
            delay=None,
            run_at=None,
            idempotency_key=None,
            singleton_key=None,
            concurrency_key=source.concurrency_key,
            trace_carrier=source.trace_carrier,
            source=RunSource(source_type, run_id=source.id),
        )
        with self.observers.producing(new.task_id, new.queue, 1):
            # The parent's carrier is kept: the new run continues the parent's trace.
            (outcome,) = await self._writer.create([new])
            if self.observers:
                self.observers.call("triggered", [outcome.run])
        return outcome.run

    # -- executing -----------------------------------------------------------------

    def lease_settings(
        self, lease_duration: Duration | None, heartbeat_interval: Duration | None
    ) -> LeaseSettings:
        """Resolve lease options against the runtime defaults."""
        duration = parse_optional_duration(lease_duration, name="lease_duration", allow_zero=False)
        interval = parse_optional_duration(
            heartbeat_interval, name="heartbeat_interval", allow_zero=False
        )
        settings = LeaseSettings(duration or self.lease_duration, interval)
        if settings.interval >= settings.duration:
            raise configuration_error("heartbeat_interval must be shorter than lease_duration.")
        return settings

    async def execute_next(
        self,
        *,
        queues: Sequence[QueueDef | str] | None = None,
        lease_duration: Duration | None = None,
        worker_id: str | None = None,
    ) -> Run | None:
        """Claim one due run, execute one attempt, and return it as settled (or ``None``)."""
        policies = self.registry.policies_for(queues)
        settings = self.lease_settings(lease_duration, None)
        owner = validate_identifier(worker_id or self.worker_id, name="worker_id")
        await self.open()
        return await self._attempts.execute_next(policies, settings, owner)

    async def run_now(
        self,
        task: TaskDef[Any] | str,
        payload: Any = None,
        *,
        queue: QueueDef | str | None = None,
        idempotency_key: str | None = None,
        singleton_key: str | None = None,
        concurrency_key: str | None = None,
        trace_carrier: Mapping[str, str] | None = None,
        lease_duration: Duration | None = None,
    ) -> Run:
        """Create a run leased to this process and execute one attempt inline.

        It never picks up another run. If the keys return an existing run, that
        run is returned untouched.
        """
        new = self.build_new_run(
            task,
            payload,
            queue=queue,
            delay=None,
            run_at=None,
            idempotency_key=idempotency_key,
            singleton_key=singleton_key,
            concurrency_key=concurrency_key,
            trace_carrier=trace_carrier,
            source=RunSource(RunSourceType.RUN_NOW),
        )
        settings = self.lease_settings(lease_duration, None)
        await self.open()
        if not self.observers:
            outcome = await self._attempts.create_leased(new, settings, self.worker_id)
        else:
            with self.observers.producing(new.task_id, new.queue, 1) as carrier:
                if carrier is not None and new.trace_carrier is None:
                    new = dataclasses.replace(new, trace_carrier=carrier)
                outcome = await self._attempts.create_leased(new, settings, self.worker_id)
                if outcome.created:
                    self.observers.call("triggered", [outcome.run])
        if not outcome.created:
            return outcome.run
        return await self._attempts.execute(outcome.run, settings)

    async def execute_delivery(
        self,
        message: DeliveryMessage,
        *,
        lease_duration: Duration | None = None,
        heartbeat_interval: Duration | None = None,
        max_attempt_duration: Duration | None = None,
        signal: Signal | None = None,
        worker_id: str | None = None,
    ) -> DeliveryResult:
        """Execute the run a wakeup points at.

        Stale, duplicate, wrong-queue, already-leased, not-due, terminal,
        foreign-environment and over-capacity wakeups return an IGNORED result
        (safe to acknowledge). Framework and storage failures raise, so the
        provider delivers the message again.
        """
        if not isinstance(message, DeliveryMessage):
            raise RunlaneError(
                ErrorCode.ADAPTER_CONTRACT_VIOLATION,
                "execute_delivery needs a DeliveryMessage (see parse_sqs_wakeup_body).",
            )
        settings = self.lease_settings(lease_duration, heartbeat_interval)
        limit = parse_optional_duration(
            max_attempt_duration, name="max_attempt_duration", allow_zero=False
        )
        owner = validate_identifier(worker_id or self.worker_id, name="worker_id")
        await self.open()
        return await execute_delivery(
            self.store,
            self._attempts,
            self.registry.queue_policies,
            message,
            settings,
            worker_id=owner,
            signal=signal,
            max_attempt_duration=limit,
        )

    def worker(
        self,
        *,
        queues: Sequence[QueueDef | str] | None = None,
        concurrency: int = 10,
        mode: WorkerMode | str | None = None,
        lease_duration: Duration | None = None,
        heartbeat_interval: Duration | None = None,
        worker_id: str | None = None,
        poll_interval: Duration = "500ms",
        handle_signals: bool = True,
        on_progress: Callable[[Run], None] | None = None,
        maintenance: bool = True,
        maintenance_interval: Duration = DEFAULT_MAINTENANCE_INTERVAL,
        claim_ahead: int | None = None,
    ) -> Worker:
        """Build a worker; ``await worker.run()`` until stopped (or drained in DRAIN mode).

        A polling worker also runs the maintenance duties of ``tick`` (schedules, lease
        recovery, pruning, ...) every ``maintenance_interval`` while it is the
        environment's elected leader: one leader across all workers, so no separate
        ``tick`` process is needed. ``maintenance=False`` leaves them to ``rl.tick()``.
        ``claim_ahead`` caps the claimed runs waiting for a slot (default: ten per slot,
        at most 400).
        """
        return Worker(
            self.store,
            self._attempts,
            self.observers,
            connect=self.open,
            tick=self.tick,
            work=self.work_bell,
            queues=self.registry.policies_for(queues),
            concurrency=concurrency,
            mode=WorkerMode(mode or WorkerMode.POLL),
            lease=self.lease_settings(lease_duration, heartbeat_interval),
            worker_id=validate_identifier(worker_id or self.worker_id, name="worker_id"),
            poll_interval=parse_duration(poll_interval, name="poll_interval", allow_zero=False),
            handle_signals=handle_signals,
            on_progress=on_progress,
            maintenance_interval=parse_duration(
                maintenance_interval, name="maintenance_interval", allow_zero=False
            )
            if maintenance
            else None,
            claim_ahead=claim_ahead,
        )

    @property
    def attempts(self) -> AttemptRunner:
        """The attempt runner (used by workers)."""
        return self._attempts

    # -- maintenance and operating ---------------------------------------------------

    async def tick(self) -> TickReport:
        """One maintenance pass; safe to run from many processes at once."""
        await self.open()
        report = await run_maintenance(self.duties)
        if self.observers:
            self.observers.call("ticked", report)
        return report

    async def queue_stats(self) -> list[QueueStats]:
        """Counts per registered queue (and per concurrency key on bounded queues)."""
        await self.open()
        return await self.storage.queue_stats(
            self.environment, self.registry.queue_policies, self.clock.now()
        )

    async def throughput(self, since: Duration | datetime = "1h") -> list[QueueThroughput]:
        """Runs per registered queue that finished (succeeded, failed, cancelled) within
        ``since`` (a duration back from now, or an aware datetime), zeros included.

        >>> sum(t.failed for t in await rl.throughput("5m"))
        2
        """
        if isinstance(since, datetime):
            start = aware_utc(since, name="since")
        else:
            start = self.clock.now() - timedelta(seconds=parse_duration(since, name="since"))
        await self.open()
        counts = await self.storage.count_finished_runs(self.environment, start)
        return [
            QueueThroughput(
                name,
                succeeded=counts.get(name, {}).get(RunStatus.SUCCEEDED, 0),
                failed=counts.get(name, {}).get(RunStatus.FAILED, 0),
                cancelled=counts.get(name, {}).get(RunStatus.CANCELLED, 0),
            )
            for name in self.registry.queues
        ]

    async def outbox_backlog(self) -> dict[str, int]:
        """Delivery requests not yet published, per registered queue (zeros included).

        Always zero on a lane without a transport: nothing is ever requested there.
        """
        await self.open()
        backlog = await self.storage.outbox_backlog(self.environment)
        return {name: backlog.get(name, 0) for name in self.registry.queues}

    def require(self, capability: str) -> None:
        """Raise CAPABILITY_UNSUPPORTED unless the storage promises ``capability``."""
        self.store.require(capability)
