"""The runtime's public calls, one class per concern. :class:`~runlane.Runlane`
(``core/runtime.py``, the composition root) inherits them and wires the services
they delegate to; each class names the services it uses, so its dependencies are
visible here rather than reached through the runtime."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar

from runlane.core.attempts import AttemptRunner
from runlane.core.delivery import execute_delivery
from runlane.core.lease_keeping import LeaseSettings
from runlane.core.maintenance import DEFAULT_MAINTENANCE_INTERVAL, Maintenance
from runlane.core.observing import Observers
from runlane.core.producing import Producer
from runlane.core.publisher import Publisher
from runlane.core.queue_pauses import PausedQueues
from runlane.core.registry import Registry
from runlane.core.run_operations import QueueCounts
from runlane.core.store import StoreScope
from runlane.core.throughput import ThroughputCharts
from runlane.core.worker import WorkBell, Worker, WorkerMode
from runlane.core.workflows import Group, Workflows
from runlane.model.context import Signal
from runlane.model.definitions import TaskDef
from runlane.model.dependencies import CANCEL
from runlane.model.queue_defs import QueueDef
from runlane.ports.lane import LaneConnection
from runlane.ports.transport import DeliveryMessage, DeliveryResult
from runlane.topics.definitions import TopicDef
from runlane.topics.records import PublishReceipt
from runlane.types.durations import Duration, parse_duration, parse_optional_duration
from runlane.types.errors import ErrorCode, RunlaneError, configuration_error
from runlane.types.ids import validate_identifier
from runlane.types.priorities import DEFAULT_PRIORITY
from runlane.types.runs import (
    QueueStats,
    QueueThroughput,
    Run,
    RunSource,
    RunSourceType,
    ThroughputSeries,
    TickReport,
)

_RUN_NOW = RunSource(RunSourceType.RUN_NOW)
#: A task's payload type: its schema with ``task(schema=...)``, else ``Any``.
P = TypeVar("P")


class ProducingCalls:
    """Creating runs and publishing messages: ``trigger``, ``trigger_many``,
    ``trigger_group``, ``trigger_chain``, ``publish``."""

    _producer: Producer
    _publisher: Publisher
    _workflows: Workflows

    async def trigger_group(
        self,
        task: TaskDef[P] | str,
        payloads: Sequence[P | Mapping[str, Any] | None],
        *,
        then: tuple[TaskDef[Any] | str, Any] | None = None,
        on_failure: str = "cancel",
    ) -> Group:
        """Create a group: one run of ``task`` per payload (up to 10,000) and, with
        ``then=(task, payload)``, a callback run ``after`` every member, all in one
        transaction (one invalid payload writes nothing).

        The callback runs exactly once, when the last member has finished: under
        ``on_failure="cancel"`` (the default) only if every member succeeded (else it
        is cancelled with reason ``dependency_failed``), under ``"run"`` whatever they
        ended as; it reads the members with ``ctx.dependencies()``. Follow the group
        with ``rl.groups.get(group.id)`` and ``rl.runs.list(group=group.id)``.

        >>> group = await rl.trigger_group(resize, [{"image": i} for i in range(500)],
        ...                                then=(zip_album, {"album": 7}))
        """
        return await self._workflows.trigger_group(task, payloads, then=then, on_failure=on_failure)

    async def trigger_chain(self, steps: Sequence[tuple[TaskDef[Any] | str, Any]]) -> list[Run]:
        """Create runs that run one after another: each step ``(task, payload)`` waits
        for the one before (``on_failure="cancel"``: a step that fails cancels the rest),
        all in one transaction. Returns the runs in order.

        >>> fetched, parsed, stored = await rl.trigger_chain(
        ...     [(fetch, {"url": url}), (parse, None), (store, None)])
        """
        return await self._workflows.trigger_chain(steps)

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
        after: Sequence[Run | str] | None = None,
        on_failure: str = "cancel",
        rate_key: str | None = None,
        priority: int = 0,
    ) -> Run:
        """Create a run of ``task``; it has committed when this returns.

        With an owned ``idempotency_key`` or an active ``singleton_key`` the
        existing run is returned instead of a new one.

        With ``after`` (runs or run ids of this environment, at most 1,000) the run
        is WAITING until every one of them has finished; in the transaction that
        finishes the last one it becomes due, or, with ``on_failure="cancel"`` (the
        default) and a dependency that failed or was cancelled, it is cancelled
        with reason ``dependency_failed``. ``on_failure="run"`` runs it however its
        dependencies ended. See the workflows guide.

        ``rate_key`` names the run's partition on a queue defined with
        ``rate_limit_by="key"`` (each key gets the queue's rate limit of its own;
        runs without one share the queue's unkeyed partition); on any other queue
        it is ``CONFIGURATION_INVALID``.

        ``priority`` (-10 to 10, default 0): higher starts first among the due runs of
        its queue, within the queue's ``priority_window`` (see the flow-control
        guide); it never lets a run start before it is due.

        >>> extract_run = await rl.trigger(extract, {"day": "2026-12-01"})
        >>> report_run = await rl.trigger(report, None, after=[extract_run])
        """
        if (
            queue is None
            and delay is None
            and run_at is None
            and idempotency_key is None
            and singleton_key is None
            and concurrency_key is None
            and trace_carrier is None
            and connection is None
            and after is None
            and on_failure == CANCEL
            and rate_key is None
            and priority is DEFAULT_PRIORITY  # (a bool or float is not: it is refused)
        ):
            # The common call, with none of the options to carry on.
            return await self._producer.trigger_default(task, payload)
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
            after=after,
            on_failure=on_failure,
            rate_key=rate_key,
            priority=priority,
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
        after: Sequence[Run | str] | None = None,
        on_failure: str = "cancel",
        rate_key: str | Callable[[Any], str | None] | None = None,
        priority: int = 0,
    ) -> list[Run]:
        """Create many runs of one task: all payloads are validated first, then
        written in batches of :data:`TRIGGER_BATCH_SIZE`, each atomic, up to
        :data:`TRIGGER_CONCURRENCY` at a time (one after another inside the caller's
        ``connection``). If a batch fails, others may have been written.

        On a storage that streams runs (PostgreSQL), a call of more than one batch
        without keys, delivery requests or ``connection`` is one transaction instead:
        each batch is validated while the one before is stored, and a bad payload or a
        failure anywhere writes nothing.

        ``after``, ``on_failure`` and ``priority`` apply to every run, as for
        :meth:`trigger`. ``rate_key`` is one key for every run or a function of each
        payload giving its key (``None``: the queue's unkeyed partition)."""
        return await self._producer.trigger_many(
            task,
            payloads,
            queue=queue,
            delay=delay,
            run_at=run_at,
            concurrency_key=concurrency_key,
            trace_carrier=trace_carrier,
            connection=connection,
            after=after,
            on_failure=on_failure,
            rate_key=rate_key,
            priority=priority,
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


class ExecutingCalls:
    """Executing runs: one at a time (``execute_next``, ``run_now``), from a wakeup
    (``execute_delivery``), or by a :class:`~runlane.Worker`."""

    registry: Registry
    store: StoreScope
    observers: Observers
    work_bell: WorkBell
    worker_id: str
    lease_duration: float
    _attempts: AttemptRunner
    _producer: Producer
    _connection: LaneConnection
    _maintenance: Maintenance
    paused_queues: PausedQueues

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
        await self._connection.open()
        pauses = self.paused_queues
        await pauses.current()
        policies = pauses.claimable(policies)
        if not policies:
            return None
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
        if self.registry.queues[new.queue].rate_limit is not None:
            # run_now starts its attempt at once, which a rate limit cannot promise.
            raise configuration_error(
                f"run_now cannot start a run of rate-limited queue {new.queue!r}; "
                "trigger it and let a worker start it when a token is free."
            )
        settings = self.lease_settings(lease_duration, None)
        await self._connection.open()
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
        await self._connection.open()
        return await execute_delivery(
            self.store,
            self._attempts,
            self.registry.queue_policies,
            self.paused_queues,
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
            pauses=self.paused_queues,
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
            hand_offs=self._connection.lane.transport is None,
        )


class OperatingCalls:
    """Maintenance and counts: ``tick``, ``queue_stats``, ``throughput``,
    ``throughput_series``, ``outbox_backlog``, ``require``."""

    store: StoreScope
    _maintenance: Maintenance
    _counts: QueueCounts
    _charts: ThroughputCharts

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

    async def throughput_series(
        self, queue: QueueDef | str | None = None, *, window: str = "1h"
    ) -> ThroughputSeries:
        """Attempts that ended per bar, by outcome (succeeded, failed, retried,
        cancelled), and their start latency p50/p95, over ``window`` (``"1h"``: one bar
        a minute; ``"1d"``: one bar per 15 minutes), for ``queue`` or every queue.

        Read from the rollup every runtime writes as its attempts settle (within a few
        seconds), so it costs the same however many runs the store holds.

        >>> series = await rl.throughput_series("emails", window="1h")
        >>> series.total.succeeded, series.total.latency_p95_ms
        (1200, 250)
        """
        return await self._charts.series(queue, window)

    async def outbox_backlog(self) -> dict[str, int]:
        """Delivery requests not yet published, per registered queue (zeros included).

        Always zero on a lane without a transport: nothing is ever requested there.
        """
        return await self._counts.outbox_backlog()

    def require(self, capability: str) -> None:
        """Raise CAPABILITY_UNSUPPORTED unless the storage promises ``capability``."""
        self.store.require(capability)
