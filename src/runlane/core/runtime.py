"""The runtime, a composition root: it binds the registry to a lane, builds the
collaborators that produce, execute, maintain and operate, and delegates its
public calls to them."""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any, TypeVar

from runlane.core.brokered import BrokeredTopics, split_topics
from runlane.core.clock import Clock, SystemClock
from runlane.core.context import Signal
from runlane.core.definitions import QueueDef, TaskDef
from runlane.core.delivering import Subscriptions
from runlane.core.delivery import DeliveryResult, execute_delivery
from runlane.core.dispatch import Dispatcher, check_transport_bindings
from runlane.core.durations import Duration, parse_duration, parse_optional_duration
from runlane.core.errors import ErrorCode, RunlaneError, configuration_error
from runlane.core.execution import DEFAULT_LEASE_DURATION, AttemptRunner, LeaseSettings
from runlane.core.ids import new_token, validate_identifier
from runlane.core.lane_spec import Lane, LaneConnection
from runlane.core.maintenance import (
    DEFAULT_MAINTENANCE_INTERVAL,
    Duty,
    Maintenance,
    standard_duties,
)
from runlane.core.observing import Observer, Observers
from runlane.core.payloads import DEFAULT_MAX_PAYLOAD_BYTES
from runlane.core.producing import Producer, RunWriter
from runlane.core.publisher import Publisher
from runlane.core.registry import Registry
from runlane.core.run_operations import IdempotencyKeys, QueueCounts, Runs
from runlane.core.schedule_service import ScheduleMaterializer, Schedules
from runlane.core.store import StoreScope
from runlane.core.sync import SyncRunlane
from runlane.core.topic_operations import DeadLetters, SubscriptionOperations
from runlane.core.worker import WorkBell, Worker, WorkerMode
from runlane.topics.definitions import SubscriptionDef, TopicDef
from runlane.topics.records import PublishReceipt
from runlane.topics.registration import TopicRegistry, register_topics
from runlane.transport.protocol import DeliveryMessage
from runlane.types.runs import (
    QueueStats,
    QueueThroughput,
    Run,
    RunSource,
    RunSourceType,
    TickReport,
)

logger = logging.getLogger("runlane")

DEFAULT_ENVIRONMENT = "default"
_RUN_NOW = RunSource(RunSourceType.RUN_NOW)
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
        topics: Sequence[TopicDef] = (),
        subscriptions: Sequence[SubscriptionDef] = (),
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
        # Topics the lane's topic transport carries (SNS) never reach storage.
        split = split_topics(
            lane.topic_transport,
            topics=topics,
            subscriptions=subscriptions,
            task_ids=self.registry.tasks.keys(),
        )
        #: Brokered topics and their subscriptions (contract 5.11), or ``None``.
        self.brokered_topics: BrokeredTopics | None = split.brokered
        #: Stored topics and subscriptions, checked against the queues and tasks (contract 5.3).
        self.topic_registry: TopicRegistry = register_topics(
            topics=split.stored_topics,
            subscriptions=split.stored_subscriptions,
            queues=self.registry.queues,
            default_queue=self.registry.default_queue,
            task_ids=self.registry.tasks.keys(),
            stores_messages=lane.storage.capabilities.stores_messages,
        )
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
        self._connection = LaneConnection(lane)
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
        if self.topic_registry.topics and not lane.storage.capabilities.stores_messages:
            # The same rule register_topics applies, for a lane swapped in later.
            register_topics(
                topics=list(self.topic_registry.topics.values()),
                subscriptions=(),
                queues=self.registry.queues,
                default_queue=self.registry.default_queue,
                task_ids=(),
                stores_messages=False,
            )
        if self.brokered_topics is not None:
            self.brokered_topics.check_lane(lane.topic_transport)
        store = StoreScope(lane.storage, self.environment, clock)
        dispatcher = None
        if lane.transport is not None:
            queues = list(self.registry.queues.values())
            check_transport_bindings(lane.transport, queues)
            dispatcher = Dispatcher(store, lane.transport, queues, self.lease_duration)
        self._connection.lane = lane
        connect = self._connection.open
        self.lane = lane
        self.storage = lane.storage
        self.clock: Clock = clock
        #: The storage calls of this runtime: its storage, environment and clock.
        self.store = store
        self.dispatcher: Dispatcher | None = dispatcher
        topics = self.topic_registry
        self._attempts = AttemptRunner(
            store,
            self.registry.tasks,
            self.observers,
            lambda: self.thread_pool,
            Subscriptions(store, topics.subscriptions),
        )
        writer = RunWriter(
            store,
            dispatcher=dispatcher,
            eager_dispatch=self.eager_dispatch,
            opened=connect,
            on_created=self.work_bell.ring,
        )
        # The producer services: runs (trigger, schedules, reruns), and messages.
        self._producer = Producer(
            self.registry,
            writer,
            self.observers,
            clock,
            max_payload_bytes=self.max_payload_bytes,
            transport=dispatcher is not None,
        )
        self._publisher = Publisher(
            topics,
            store,
            self.observers,
            dispatcher=dispatcher,
            eager_dispatch=self.eager_dispatch,
            opened=connect,
            on_created=self.work_bell.ring,
            max_payload_bytes=self.max_payload_bytes,
            brokered=self.brokered_topics,
        )
        #: The duties of one maintenance pass (``tick``), in order.
        self.duties: tuple[Duty, ...] = standard_duties(
            store=store,
            tasks=self.registry.tasks,
            observers=self.observers,
            schedules=ScheduleMaterializer(
                store, self.registry.schedules, self._producer, self.observers
            ),
            dispatcher=dispatcher,
            retention=self.retention,
            subscription_retries={name: sub.retry for name, sub in topics.subscriptions.items()},
        )
        self._maintenance = Maintenance(self.duties, self.observers, connect)
        self._counts = QueueCounts(store, self.registry, connect)
        #: Operator calls on this lane's runs and idempotency keys.
        self.runs: Runs = Runs(store, self.registry, connect, self._producer.create_child_run)
        self.idempotency_keys: IdempotencyKeys = IdempotencyKeys(store, self.registry, connect)
        #: Listing, pausing and resuming this lane's schedules.
        self.schedules: Schedules = Schedules(store, self.registry.schedules, connect)
        #: Listing, replaying and discarding dead letters (stored, and SNS with ``subscription=``).
        self.dead_letters: DeadLetters = DeadLetters(
            store, topics, connect, brokered=self.brokered_topics
        )
        #: Deliveries per status and halted keys of each registered subscription.
        self.subscriptions: SubscriptionOperations = SubscriptionOperations(
            store, topics, connect, brokered=self.brokered_topics
        )

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
    def topics(self) -> Mapping[str, TopicDef]:
        """Registered topics by name, stored and brokered (the stored ones' subscriptions:
        ``rl.topic_registry``; the brokered ones: ``rl.brokered_topics``)."""
        if self.brokered_topics is None:
            return self.topic_registry.topics
        return {**self.topic_registry.topics, **self.brokered_topics.topics}

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
        return self._connection.is_open

    async def open(self) -> None:
        """Connect the lane. Safe to call more than once."""
        await self._connection.open()

    async def close(self) -> None:
        """Close the lane (also when only :meth:`migrate` connected it) and the thread pool."""
        await self._connection.close()
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

    # -- producing (delegated to the producer services built in bind_lane) ----------

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
        return await self._producer.trigger(
            task,
            payload,
            queue=queue,
            delay=delay,
            run_at=run_at,
            idempotency_key=idempotency_key,
            singleton_key=singleton_key,
            concurrency_key=concurrency_key,
            trace_carrier=trace_carrier,
            connection=connection,
        )

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
        return await self._producer.trigger_many(
            task,
            payloads,
            queue=queue,
            delay=delay,
            run_at=run_at,
            concurrency_key=concurrency_key,
            trace_carrier=trace_carrier,
            connection=connection,
        )

    async def publish(
        self,
        topic: TopicDef | str,
        payload: Any = None,
        *,
        attributes: Mapping[str, str] | None = None,
        message_id: str | None = None,
        deduplication_key: str | None = None,
        trace_carrier: Mapping[str, str] | None = None,
        connection: Any = None,
    ) -> PublishReceipt:
        """Publish a message to a stored topic: the message and one delivery run per
        matching subscription are written in one transaction, committed when this
        returns (inside ``connection``: part of the caller's transaction).

        A ``deduplication_key`` held within the topic's window, or a ``message_id``
        published before with the same content, returns the original's receipt with
        ``duplicate=True`` and writes nothing.

        A topic on SNS is published to SNS and nothing is stored: the receipt has no
        runs, no ``sequence`` and SNS's ``provider_message_id``; ``deduplication_key``
        and ``connection`` are ``CAPABILITY_UNSUPPORTED`` there.

        >>> receipt = await rl.publish(orders, {"id": 7}, attributes={"event": "paid"})
        """
        return await self._publisher.publish(
            topic,
            payload,
            attributes=attributes,
            message_id=message_id,
            deduplication_key=deduplication_key,
            trace_carrier=trace_carrier,
            connection=connection,
        )

    # -- executing -----------------------------------------------------------------

    def lease_settings(
        self, lease_duration: Duration | None, heartbeat_interval: Duration | None
    ) -> LeaseSettings:
        """Resolve lease options against the runtime defaults."""
        return LeaseSettings.resolve(self.lease_duration, lease_duration, heartbeat_interval)

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
        new = self._producer.build_new_run(
            task,
            payload,
            queue=queue,
            idempotency_key=idempotency_key,
            singleton_key=singleton_key,
            concurrency_key=concurrency_key,
            trace_carrier=trace_carrier,
            source=_RUN_NOW,
        )
        settings = self.lease_settings(lease_duration, None)
        await self.open()
        return await self._attempts.run_now(new, settings, self.worker_id)

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
            connect=self._connection.open,
            tick=self._maintenance.tick,
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

    # -- maintenance and operating ---------------------------------------------------

    async def tick(self) -> TickReport:
        """One maintenance pass; safe to run from many processes at once."""
        return await self._maintenance.tick()

    async def queue_stats(self) -> list[QueueStats]:
        """Counts per registered queue (and per concurrency key on bounded queues)."""
        return await self._counts.queue_stats()

    async def throughput(self, since: Duration | datetime = "1h") -> list[QueueThroughput]:
        """Runs per registered queue that finished (succeeded, failed, cancelled) within
        ``since`` (a duration back from now, or an aware datetime), zeros included.

        >>> sum(t.failed for t in await rl.throughput("5m"))
        2
        """
        return await self._counts.throughput(since)

    async def outbox_backlog(self) -> dict[str, int]:
        """Delivery requests not yet published, per registered queue (zeros included).

        Always zero on a lane without a transport: nothing is ever requested there.
        """
        return await self._counts.outbox_backlog()

    def require(self, capability: str) -> None:
        """Raise CAPABILITY_UNSUPPORTED unless the storage promises ``capability``."""
        self.store.require(capability)
