"""The runtime, a composition root: it binds the registry to a lane and builds the
collaborators that produce, execute, maintain and operate. Its public calls, which
delegate to them, are inherited from ``core/calls.py``."""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from runlane.core.attempts import AttemptRunner
from runlane.core.brokered import BrokeredTopics, split_topics
from runlane.core.calls import ExecutingCalls, OperatingCalls, ProducingCalls
from runlane.core.delivering import Subscriptions
from runlane.core.dispatch import Dispatcher, check_transport_bindings
from runlane.core.lease_keeping import DEFAULT_LEASE_DURATION
from runlane.core.maintenance import (
    Duty,
    Maintenance,
    standard_duties,
)
from runlane.core.observing import Observer, Observers
from runlane.core.producing import Producer, RunWriter
from runlane.core.publisher import Publisher
from runlane.core.queue_pauses import PausedQueues, Queues
from runlane.core.registry import Registry
from runlane.core.run_operations import IdempotencyKeys, QueueCounts, Runs
from runlane.core.schedule_service import ScheduleMaterializer, Schedules
from runlane.core.store import StoreScope
from runlane.core.sync import SyncRunlane
from runlane.core.throughput import ThroughputCharts, ThroughputRecorder
from runlane.core.topic_operations import DeadLetters, SubscriptionOperations
from runlane.core.worker import WorkBell
from runlane.core.workflows import Groups, Workflows
from runlane.model.definitions import TaskDef
from runlane.model.payloads import DEFAULT_MAX_PAYLOAD_BYTES
from runlane.model.queue_defs import QueueDef
from runlane.ports.lane import Lane, LaneConnection
from runlane.ports.storage import KeepsServerTime
from runlane.topics.definitions import SubscriptionDef, TopicDef
from runlane.topics.registration import TopicRegistry, register_topics
from runlane.types.clock import Clock, SystemClock
from runlane.types.durations import Duration, parse_duration, parse_optional_duration
from runlane.types.errors import configuration_error
from runlane.types.ids import new_token, validate_identifier

logger = logging.getLogger("runlane")

DEFAULT_ENVIRONMENT = "default"


def default_worker_id() -> str:
    """``host-pid-random``: unique per process, readable in operator views."""
    host = socket.gethostname().replace(":", "-")[:64] or "host"
    return f"{host}-{os.getpid()}-{new_token()[:6]}"


class Runlane(ProducingCalls, ExecutingCalls, OperatingCalls):
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
        #: Counts settled attempts into the throughput rollup (the settle batchers tell
        #: it; not an observer, so attempts keep the no-observer path); the charts read it.
        self._throughput = ThroughputRecorder()
        #: Wakes this process's idle workers when it creates runnable work.
        self.work_bell = WorkBell()
        #: The clock passed to the constructor; None: the lane's (see :meth:`bind_lane`).
        self.given_clock = clock
        self.bind_lane(lane, clock)
        self._sync: SyncRunlane | None = None
        # Last, so each observer's ``attached`` sees a fully wired runtime.
        for observer in observers:
            self.observers.add(observer)

    def bind_lane(self, lane: Lane, clock: Clock | None) -> None:
        """Wire this runtime to ``lane`` and ``clock``: its store scope, dispatcher and
        maintenance duties. The constructor calls it; ``runlane.testing.on_lane`` calls
        it again on a closed runtime to point an app's runtime at a test lane.

        Without a ``clock``, the lane's: a storage whose server keeps the time (PostgreSQL,
        ``KeepsServerTime``) gives its server's clock, any other the host's (SPEC-flow 10).
        """
        if clock is None:
            storage = lane.storage
            clock = storage.server_clock if isinstance(storage, KeepsServerTime) else SystemClock()
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
        #: The paused queues as this process knows them; every claimer leaves them out.
        self.paused_queues = PausedQueues(store)
        dispatcher = None
        if lane.transport is not None:
            queues = list(self.registry.queues.values())
            check_transport_bindings(lane.transport, queues)
            dispatcher = Dispatcher(
                store, lane.transport, queues, self.lease_duration, self.paused_queues
            )
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
            self._throughput,
        )
        writer = RunWriter(
            store,
            dispatcher=dispatcher,
            eager_dispatch=self.eager_dispatch,
            lane=self._connection,
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
        self._throughput.bind(store)
        self._charts = ThroughputCharts(store, self.registry, connect)
        #: Operator calls on this lane's runs and idempotency keys.
        self.runs: Runs = Runs(store, self.registry, connect, self._producer.create_child_run)
        self.idempotency_keys: IdempotencyKeys = IdempotencyKeys(store, self.registry, connect)
        #: Reading groups (``rl.trigger_group``).
        self.groups: Groups = Groups(store, writer, connect)
        self._workflows = Workflows(self._producer, writer)
        self._queues = Queues(
            store,
            self.registry.queues,
            self.paused_queues,
            connect,
            on_resumed=self.work_bell.ring,
            dispatcher=dispatcher,
            eager_dispatch=self.eager_dispatch,
        )
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
    def queues(self) -> Queues:
        """Registered queues by name (a read-only mapping), with ``pause``, ``resume``
        and ``list`` for operators."""
        return self._queues

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
        await self.runs.close()
        await self._throughput.flush()
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
