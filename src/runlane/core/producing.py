"""Producing runs: validation done once per call, and group commit for lone triggers.

:class:`Producer` is the producing side of ``Runlane``: ``trigger``,
``trigger_many``, the child runs of reruns and manual retries, and the
validated runs schedules and ``run_now`` create.

A :class:`TriggerPlan` holds everything about the runs of one ``trigger`` or
``trigger_many`` call that does not depend on the payload (task, queue, due
time, keys' rules, trace carrier), validated once; :meth:`TriggerPlan.prepare`
and :meth:`TriggerPlan.new_run` then only validate and encode each payload.

:class:`CreationBatcher` gives concurrent ``trigger`` calls one storage write
(and one commit) between them: the first caller writes at once; callers that
arrive while a write is in flight join the next one. A lone caller never waits
for company, so batching adds no latency.
"""

from __future__ import annotations

import asyncio
import dataclasses
import weakref
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from itertools import islice
from typing import Any, cast

from runlane.core.dispatch import OUTBOX_CLAIM_WINDOW, Dispatcher
from runlane.core.observing import Observers
from runlane.core.registry import Registry
from runlane.core.store import StoreScope
from runlane.model.definitions import TaskDef
from runlane.model.dependencies import CANCEL, dependency_ids, validate_on_failure
from runlane.model.payloads import prepare_payload, prepare_payloads
from runlane.model.queue_defs import UNKEYED, QueueDef
from runlane.ports.lane import LaneConnection
from runlane.ports.storage import (
    CreatesLoneRuns,
    CreatesRunBatches,
    Storage,
    StreamsRuns,
    TracksDependencies,
)
from runlane.types.carriers import validate_trace_carrier
from runlane.types.clock import Clock, aware_utc
from runlane.types.durations import Duration, parse_duration
from runlane.types.errors import ErrorCode, RunlaneError, configuration_error
from runlane.types.ids import new_run_id, validate_identifier, validate_optional_identifier
from runlane.types.priorities import DEFAULT_PRIORITY, priority_offset, validate_priority
from runlane.types.records import CreateOutcome, NewGroup, NewRun, NewRunBatch, NewWaitingRun
from runlane.types.runs import Run, RunSource, RunSourceType, RunStatus
from runlane.types.slot_init import slot_init

#: The most runs one group-committed write carries.
MAX_GROUP_SIZE = 1000
#: Bulk triggers write this many runs per storage round trip.
TRIGGER_BATCH_SIZE = 1000
#: Batches of one ``trigger_many`` call written at once.
TRIGGER_CONCURRENCY = 2
_TRIGGERED = RunSource(RunSourceType.TRIGGER)


@slot_init
@dataclass(frozen=True, slots=True)
class Prepared:
    """Validated payloads as parallel lists: value for the handler, JSON value, JSON text.

    Lists rather than a tuple per payload: a large ``trigger_many`` keeps them until
    it returns, and every tuple kept is one more object for the garbage collector.
    """

    instances: list[Any]
    values: list[Any]
    texts: list[str]

    def __len__(self) -> int:
        return len(self.texts)


@slot_init
@dataclass(frozen=True, slots=True)
class TriggerPlan:
    """The payload-independent part of the runs one call creates, already validated."""

    task: TaskDef[Any]
    queue: QueueDef
    run_at: datetime
    status: RunStatus
    source: RunSource
    request_delivery: bool
    max_payload_bytes: int
    #: An explicit key, a function of the payload, or None (see TaskDef).
    idempotency_key: Any
    singleton_key: Any
    idempotency_expires_at: datetime | None
    concurrency_key: str | None
    trace_carrier: dict[str, str] | None
    priority: int
    #: The runs' place ahead of their due time in the queue's order (microseconds).
    priority_offset: int
    #: On a queue rate-limited per key: a key, or a function of the payload giving one
    #: (its None, like no key at all, is the queue's unkeyed partition ''); else None.
    rate_key: Any = None

    @property
    def plain(self) -> bool:
        """Whether the runs are bare rows: no idempotency, singleton or rate key, no
        delivery request (what :class:`~runlane.ports.storage.StreamsRuns` takes)."""
        return (
            self.idempotency_key is None
            and self.singleton_key is None
            and not self.request_delivery
            and self.rate_key is None
        )

    @property
    def uniform(self) -> bool:
        """Whether nothing but the id and the payload differs between the runs: no
        idempotency or singleton key, no dependencies, no rate key taken from the
        payload (a delivery request, shared by all, may be there)."""
        return (
            type(self) is TriggerPlan
            and self.idempotency_key is None
            and self.singleton_key is None
            and not callable(self.rate_key)
        )

    @property
    def batchable(self) -> bool:
        """Whether the runs differ only in id and payload and request no delivery (what
        :class:`~runlane.ports.storage.CreatesRunBatches` takes)."""
        return self.uniform and not self.request_delivery

    def batch(self, prepared: Prepared, start: int, stop: int) -> NewRunBatch:
        """The runs of the payloads ``start:stop`` :meth:`prepare` accepted, with fresh
        ids, as one :class:`NewRunBatch` (the plan must be :attr:`batchable`)."""
        return NewRunBatch(
            new_run_id.many(stop - start),
            prepared.values[start:stop],
            prepared.texts[start:stop],
            self.task.id,
            self.queue.name,
            self.status,
            self.run_at,
            self.source,
            self.concurrency_key,
            self.trace_carrier,
            self.rate_key,
            self.priority,
            self.priority_offset,
        )

    def batches(self, payloads: Sequence[Any]) -> Iterator[list[NewRun]]:
        """The runs of ``payloads`` in batches of :data:`TRIGGER_BATCH_SIZE`, each
        validated and built only when asked for (raises on the first bad payload)."""
        pending = iter(payloads)
        while chunk := list(islice(pending, TRIGGER_BATCH_SIZE)):
            prepared = self.prepare(chunk)
            yield self.build(prepared, 0, len(prepared))

    def prepare(self, payloads: Sequence[Any]) -> Prepared:
        """Validate and encode every payload (raises on the first bad one)."""
        return Prepared(*prepare_payloads(self.task, payloads, self.max_payload_bytes))

    def build(self, prepared: Prepared, start: int, stop: int) -> list[NewRun]:
        """The runs of the payloads ``start:stop`` :meth:`prepare` accepted, with fresh ids."""
        ids = new_run_id.many(stop - start)
        if self.uniform:
            # Nothing differs but the id and the payload: the shared fields are read
            # once, and each run is built in order (NewRun's fields, positionally).
            task_id, queue, status, run_at, source = (
                self.task.id,
                self.queue.name,
                self.status,
                self.run_at,
                self.source,
            )
            concurrency_key, carrier, rate_key = (
                self.concurrency_key,
                self.trace_carrier,
                self.rate_key,
            )
            delivery, priority, offset = (
                self.request_delivery,
                self.priority,
                self.priority_offset,
            )
            return [
                NewRun(
                    run_id,
                    task_id,
                    queue,
                    status,
                    value,
                    encoded,
                    run_at,
                    source,
                    None,
                    None,
                    None,
                    concurrency_key,
                    carrier,
                    rate_key,
                    delivery,
                    priority,
                    offset,
                )
                for run_id, value, encoded in zip(
                    ids, prepared.values[start:stop], prepared.texts[start:stop], strict=True
                )
            ]
        run_at, expires_at = self.run_at, self.idempotency_expires_at
        return [
            self._run(run_id, instance, value, encoded, run_at, expires_at)
            for run_id, instance, value, encoded in zip(
                ids,
                prepared.instances[start:stop],
                prepared.values[start:stop],
                prepared.texts[start:stop],
                strict=True,
            )
        ]

    def new_run(self, payload: Any) -> NewRun:
        """One validated :class:`NewRun` (a lone trigger's: no batch lists to build)."""
        instance, value, encoded = prepare_payload(self.task, payload, self.max_payload_bytes)
        return self._run(
            new_run_id(), instance, value, encoded, self.run_at, self.idempotency_expires_at
        )

    def new_run_due(self, payload: Any, now: datetime) -> NewRun:
        """:meth:`new_run` of a plan made with every option at its default (due when it
        was made), due ``now`` instead: a lone trigger's run, from the plan of an
        earlier call (:meth:`Producer.trigger`)."""
        instance, value, encoded = prepare_payload(self.task, payload, self.max_payload_bytes)
        expires_at = _key_expiry(self.task, now)
        return self._run(new_run_id(), instance, value, encoded, now, expires_at)

    def _run(
        self,
        run_id: str,
        instance: Any,
        value: Any,
        encoded: str,
        run_at: datetime,
        idempotency_expires_at: datetime | None,
    ) -> NewRun:
        idempotency_key = singleton_key = None
        if self.idempotency_key is not None or self.singleton_key is not None:
            idempotency_key = _key_from(self.idempotency_key, instance, "idempotency_key")
            singleton_key = _key_from(self.singleton_key, instance, "singleton_key")
        # The required fields positionally: a call with more than 15 keyword arguments
        # compiles to one that builds a dict of them first, at several times the cost.
        return NewRun(
            run_id,
            self.task.id,
            self.queue.name,
            self.status,
            value,
            encoded,
            run_at,
            self.source,
            idempotency_key=idempotency_key,
            idempotency_expires_at=idempotency_expires_at if idempotency_key is not None else None,
            singleton_key=singleton_key,
            concurrency_key=self.concurrency_key,
            trace_carrier=self.trace_carrier,
            rate_key=(
                _rate_key_from(self.rate_key, instance)
                if callable(self.rate_key)
                else self.rate_key
            ),
            request_delivery=self.request_delivery,
            priority=self.priority,
            priority_offset=self.priority_offset,
        )


# Without slot_init: it builds stores for a class's own slots only, and this is rare.
@dataclass(frozen=True, slots=True)
class WaitingPlan(TriggerPlan):
    """A :class:`TriggerPlan` whose runs wait for other runs (``after=``, validated)."""

    after: tuple[str, ...] = ()
    on_failure: str = "cancel"

    @property
    def plain(self) -> bool:
        """Never: waiting runs have edges to write."""
        return False

    def _run(
        self,
        run_id: str,
        instance: Any,
        value: Any,
        encoded: str,
        run_at: datetime,
        idempotency_expires_at: datetime | None,
    ) -> NewRun:
        new = TriggerPlan._run(
            self, run_id, instance, value, encoded, run_at, idempotency_expires_at
        )
        fields = {field.name: getattr(new, field.name) for field in dataclasses.fields(new)}
        return NewWaitingRun(**fields, after=self.after, on_failure=self.on_failure)


def _key_expiry(task: TaskDef[Any], now: datetime) -> datetime | None:
    """When the idempotency key of a run ``task`` creates at ``now`` expires (``None``:
    the task keeps its keys for good)."""
    ttl = task.idempotency_key_ttl
    return now + timedelta(seconds=ttl) if ttl else None


def plan_trigger(
    task: TaskDef[Any],
    target: QueueDef,
    *,
    now: datetime,
    source: RunSource,
    max_payload_bytes: int,
    transport: bool,
    delay: Duration | None = None,
    run_at: datetime | None = None,
    idempotency_key: str | None = None,
    singleton_key: str | None = None,
    concurrency_key: str | None = None,
    trace_carrier: Mapping[str, str] | None = None,
    rate_key: str | Callable[[Any], str | None] | None = None,
    priority: int = DEFAULT_PRIORITY,
) -> TriggerPlan:
    """Validate the options of one call; ``transport``: the lane wakes workers through one."""
    validate_priority(priority)
    if delay is not None and run_at is not None:
        raise configuration_error("pass delay or run_at, not both.")
    if run_at is not None:
        due = aware_utc(run_at, name="run_at")
    else:
        # Only None means "no delay": "", [] and {} are mistakes, not zero.
        seconds = 0.0 if delay is None else parse_duration(delay, name="delay")
        due = now + timedelta(seconds=seconds)
    if idempotency_key is not None:
        validate_identifier(idempotency_key, name="idempotency_key")
    if singleton_key is not None:
        validate_identifier(singleton_key, name="singleton_key")
    validate_optional_identifier(concurrency_key, name="concurrency_key")
    keyed = target.rate_limit_by is not None
    if rate_key is not None:
        if not keyed:
            raise configuration_error(
                f"rate_key needs a queue rate-limited per key; queue {target.name!r} is not "
                "(define it with rate_limit=... and rate_limit_by='key')."
            )
        if isinstance(rate_key, str):
            validate_identifier(rate_key, name="rate_key")
        elif not callable(rate_key):
            raise configuration_error("rate_key must be a string or a function of the payload.")
    return TriggerPlan(
        task=task,
        queue=target,
        run_at=due,
        status=RunStatus.SCHEDULED if due > now else RunStatus.QUEUED,
        source=source,
        request_delivery=(
            transport
            and target.concurrency_limit is None
            and due <= now
            and source.type is not RunSourceType.RUN_NOW
        ),
        max_payload_bytes=max_payload_bytes,
        idempotency_key=task.idempotency_key if idempotency_key is None else idempotency_key,
        singleton_key=task.singleton_key if singleton_key is None else singleton_key,
        idempotency_expires_at=_key_expiry(task, now),
        concurrency_key=concurrency_key,
        trace_carrier=validate_trace_carrier(trace_carrier),
        # Runs without a key share the keyed queue's unkeyed partition.
        rate_key=(rate_key if rate_key is not None else UNKEYED) if keyed else None,
        priority=priority,
        priority_offset=priority_offset(priority, target.priority_window),
    )


def _rate_key_from(option: Callable[[Any], str | None], payload: Any) -> str:
    value = option(payload)
    return UNKEYED if value is None else validate_identifier(value, name="rate_key")


def _key_from(option: Any, payload: Any, name: str) -> str | None:
    if option is None:
        return None
    value = option if isinstance(option, str) else option(payload)
    return None if value is None else validate_identifier(value, name=name)


Write = Callable[[Sequence[NewRun]], Awaitable[list[CreateOutcome]]]


class CreationBatcher:
    """Group commit for concurrent lone triggers (see the module docstring); one per
    event loop (the runtime keeps one for each loop it is used on)."""

    def __init__(self, write: Write) -> None:
        self._write = write
        self._waiting: list[tuple[NewRun, asyncio.Future[CreateOutcome]]] = []
        self._writer: asyncio.Task[None] | None = None
        #: Whether a caller is writing its run itself (no write was in flight when it came).
        self._direct = False

    async def create(self, new: NewRun) -> CreateOutcome:
        """Write ``new`` (with whatever other runs are waiting) and return its outcome.

        A caller cancelled before its group is written creates nothing.
        """
        if self.begin_direct():
            try:
                (outcome,) = await self._write([new])
            finally:
                self.end_direct()
            return outcome
        future: asyncio.Future[CreateOutcome] = asyncio.get_running_loop().create_future()
        self._waiting.append((new, future))
        return await future

    def begin_direct(self) -> bool:
        """Whether the caller may write its run itself, now: nothing is in flight. If so,
        it writes in its own task, with no task or future to hand the outcome over, and
        calls :meth:`end_direct` when done; callers arriving meanwhile wait for the next
        write."""
        if self._direct or (self._writer is not None and not self._writer.done()):
            return False
        self._direct = True
        return True

    def end_direct(self) -> None:
        """End a write :meth:`begin_direct` allowed (however it ended); the callers that
        arrived meanwhile are written next."""
        self._direct = False
        if self._waiting:
            self._writer = asyncio.get_running_loop().create_task(self._drain())

    async def _drain(self) -> None:
        while self._waiting:
            group = [entry for entry in self._waiting[:MAX_GROUP_SIZE] if not entry[1].done()]
            del self._waiting[:MAX_GROUP_SIZE]
            if not group:
                continue
            try:
                outcomes = await self._write([new for new, _ in group])
            except BaseException as error:  # every caller of the group learns why
                for _, future in group:
                    if future.done():
                        continue
                    if isinstance(error, Exception):
                        future.set_exception(error)
                    else:
                        future.cancel()
                if not isinstance(error, Exception):
                    raise
                continue
            for (_, future), outcome in zip(group, outcomes, strict=True):
                if not future.done():
                    future.set_result(outcome)


class RunWriter:
    """Writes validated runs to storage: lone triggers group-committed per event loop,
    bulk triggers in bounded concurrent batches, and on a transport lane with eager
    dispatch the wakeups published right after commit."""

    def __init__(
        self,
        store: StoreScope,
        *,
        dispatcher: Dispatcher | None,
        eager_dispatch: bool,
        lane: LaneConnection,
        on_created: Callable[[], None],
    ) -> None:
        """``lane``: the runtime's lane, opened before the first write."""
        self._store = store
        self._dispatcher = dispatcher
        self._eager = eager_dispatch
        self._lane = lane
        self._opened = lane.open
        self._on_created = on_created
        storage = store.storage
        #: One run's write: the storage's own when it has one.
        self._create_lone: Callable[[str, NewRun, datetime], Awaitable[CreateOutcome]] = (
            storage.create_lone_run
            if isinstance(storage, CreatesLoneRuns)
            else partial(_create_lone_run, storage)
        )
        #: Group commit per event loop (``rl.sync`` runs its own loop beside the app's).
        self._batchers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, CreationBatcher] = (
            weakref.WeakKeyDictionary()
        )

    async def create_one(self, new: NewRun, connection: Any) -> CreateOutcome:
        """Write one run; without keys, dependencies or a caller's connection it shares
        a commit (a dependent's unknown dependency fails its own write only)."""
        if (
            connection is None
            and new.idempotency_key is None
            and new.singleton_key is None
            and type(new) is NewRun
        ):
            # Concurrent lone triggers share one write and one commit.
            loop = asyncio.get_running_loop()
            batcher = self._batchers.get(loop)
            if batcher is None:
                batcher = self._batchers[loop] = CreationBatcher(self.create)
            if not (self._lane.is_open and not new.request_delivery and batcher.begin_direct()):
                return await batcher.create(new)
            # What the batcher's own write would do (see create), in this call: a lone
            # trigger's every step is on its path, and each coroutine costs.
            try:
                store = self._store
                outcome = await self._create_lone(store.environment, new, store.now())
            finally:
                batcher.end_direct()
            if outcome.created and outcome.run.lease is None:
                self._on_created()
            return outcome
        (outcome,) = await self.create([new], connection=connection)
        return outcome

    def streams(self, plan: TriggerPlan, count: int, connection: Any) -> bool:
        """Whether a bulk call of ``count`` payloads goes to :meth:`create_stream`: more
        than one batch of plain runs, outside a caller's transaction, on a storage
        that streams them."""
        return (
            count > TRIGGER_BATCH_SIZE
            and connection is None
            and plan.plain
            and isinstance(self._store.storage, StreamsRuns)
        )

    async def create_stream(self, plan: TriggerPlan, payloads: Sequence[Any]) -> list[Run]:
        """Validate and write the runs of one bulk call batch by batch in one storage
        transaction, so storage writes a batch while the next is validated: all or
        none (a bad payload anywhere writes nothing)."""
        await self._opened()
        store = self._store
        storage = cast(StreamsRuns, store.storage)  # checked by streams()
        runs = await storage.create_run_stream(
            store.environment, plan.batches(payloads), store.now()
        )
        if runs:
            self._on_created()
        return runs

    async def create_planned(
        self, plan: TriggerPlan, prepared: Prepared, connection: Any
    ) -> list[Run]:
        """Write the runs of one bulk call in batches of :data:`TRIGGER_BATCH_SIZE`, each
        atomic, up to :data:`TRIGGER_CONCURRENCY` at a time (one after another inside
        the caller's ``connection``)."""
        spans = [
            (start, min(start + TRIGGER_BATCH_SIZE, len(prepared)))
            for start in range(0, len(prepared), TRIGGER_BATCH_SIZE)
        ]

        storage = self._store.storage
        if plan.batchable and isinstance(storage, CreatesRunBatches):

            async def write(start: int, stop: int) -> list[Run]:
                return await self._create_batch(
                    storage, plan.batch(prepared, start, stop), connection
                )

        else:

            async def write(start: int, stop: int) -> list[Run]:
                outcomes = await self.create(
                    plan.build(prepared, start, stop), connection=connection
                )
                return [outcome.run for outcome in outcomes]

        if connection is not None or len(spans) < 2:
            written = [await write(start, stop) for start, stop in spans]
        else:
            # A few batches in flight at once: the database stores one while this
            # process builds the next.
            gate = asyncio.Semaphore(TRIGGER_CONCURRENCY)

            async def gated(start: int, stop: int) -> list[Run]:
                async with gate:
                    return await write(start, stop)

            writes = [asyncio.ensure_future(gated(start, stop)) for start, stop in spans]
            try:
                written = await asyncio.gather(*writes)
            except BaseException:
                # The first failure is the caller's error (not an ExceptionGroup): stop
                # the batches not written yet and wait for those in flight.
                for pending in writes:
                    pending.cancel()
                await asyncio.gather(*writes, return_exceptions=True)
                raise
        return [run for runs in written for run in runs]

    async def _create_batch(
        self, storage: CreatesRunBatches, batch: NewRunBatch, connection: Any
    ) -> list[Run]:
        """Write one batch of plain runs (they request no delivery: nothing to publish)."""
        await self._opened()
        store = self._store
        runs = await storage.create_run_batch(
            store.environment, batch, store.now(), connection=connection
        )
        if runs:
            self._on_created()
        return runs

    @property
    def environment(self) -> str:
        """The environment runs are written to."""
        return self._store.environment

    def require_dependencies(self) -> TracksDependencies:
        """The storage, if it keeps runs that wait for other runs; else
        ``CAPABILITY_UNSUPPORTED``."""
        storage = self._store.storage
        if not isinstance(storage, TracksDependencies):
            raise RunlaneError(
                ErrorCode.CAPABILITY_UNSUPPORTED,
                f"{type(storage).__name__} does not keep dependencies between runs "
                "(after=, trigger_group, trigger_chain).",
            )
        return storage

    async def create_group(
        self, storage: TracksDependencies, group: NewGroup, members: Sequence[NewRun]
    ) -> tuple[list[Run], Run | None]:
        """Write a group's members, the group and its callback in one transaction; on a
        transport lane publish the members' wakeups right after commit, as :meth:`create`."""
        await self._opened()
        store = self._store
        now = store.now()
        claimed_until = self._outbox_claim(now, connection=None)
        outcomes, callback = await storage.create_group(
            store.environment, group, members, now, outbox_claimed_until=claimed_until
        )
        self._on_created()
        await self._publish_claimed(outcomes, claimed_until)
        return [outcome.run for outcome in outcomes], callback

    async def create(
        self, new_runs: Sequence[NewRun], *, connection: Any = None
    ) -> list[CreateOutcome]:
        """Write runs; on a transport lane publish their wakeups right after commit."""
        await self._opened()
        store = self._store
        now = store.now()
        claimed_until = self._outbox_claim(now, connection)
        outcomes = await store.storage.create_runs(
            store.environment,
            new_runs,
            now,
            connection=connection,
            outbox_claimed_until=claimed_until,
        )
        # Runs created leased (handed to a worker standing by, or run_now's) wake nobody.
        if any(o.created and o.run.lease is None for o in outcomes):
            self._on_created()
        if claimed_until is not None:  # (most writes: no coroutine made for nothing)
            await self._publish_claimed(outcomes, claimed_until)
        return outcomes

    def _outbox_claim(self, now: datetime, connection: Any) -> datetime | None:
        """Until when a write's delivery requests are claimed by this process, which
        publishes them right after commit (eager dispatch on a transport lane); ``None``
        leaves them pending for ``tick``. Inside the caller's transaction nothing may be
        published before it commits, so those wakeups always wait in the outbox."""
        if self._dispatcher is None or not self._eager or connection is not None:
            return None
        return now + OUTBOX_CLAIM_WINDOW

    async def _publish_claimed(
        self, outcomes: Sequence[CreateOutcome], claimed_until: datetime | None
    ) -> None:
        """Publish the delivery requests a committed write claimed (see
        :meth:`_outbox_claim`); one that fails stays in the outbox for ``tick``."""
        if claimed_until is not None and self._dispatcher is not None:
            await self._dispatcher.publish([m for o in outcomes for m in o.outbox])


async def _create_lone_run(
    storage: Storage, environment: str, new: NewRun, now: datetime
) -> CreateOutcome:
    """:meth:`~runlane.ports.storage.CreatesLoneRuns.create_lone_run` on a storage
    without it."""
    (outcome,) = await storage.create_runs(environment, [new], now)
    return outcome


class Producer:
    """Creates runs of registered tasks: validates a call's options and payloads
    against ``registry`` (timed by ``clock``), wraps the write in the observers'
    ``producing`` hook and hands the runs to ``writer``."""

    def __init__(
        self,
        registry: Registry,
        writer: RunWriter,
        observers: Observers,
        clock: Clock,
        *,
        max_payload_bytes: int,
        transport: bool,
    ) -> None:
        """``transport``: the lane wakes workers through a transport (runs on queues
        without a concurrency limit then request a delivery)."""
        self._registry = registry
        self._writer = writer
        self._observers = observers
        self._clock = clock
        self._max_payload_bytes = max_payload_bytes
        self._transport = transport
        #: Per task (by identity): its default queue and the plan of a trigger with every
        #: option at its default, which only the due time tells apart from the next.
        self._default_plans: dict[int, tuple[TaskDef[Any], QueueDef, TriggerPlan]] = {}

    async def trigger(
        self,
        task: TaskDef[Any] | str,
        payload: Any,
        *,
        queue: QueueDef | str | None,
        delay: Duration | None,
        run_at: datetime | None,
        idempotency_key: str | None,
        singleton_key: str | None,
        concurrency_key: str | None,
        trace_carrier: Mapping[str, str] | None,
        connection: Any,
        after: Sequence[Run | str] | None = None,
        on_failure: str = CANCEL,
        rate_key: str | None = None,
        priority: int = DEFAULT_PRIORITY,
    ) -> Run:
        """``Runlane.trigger``: one run, or the existing run its keys point at (with
        every option at its default, :meth:`trigger_default` takes fewer steps)."""
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
            after=after,
            on_failure=on_failure,
            rate_key=rate_key,
            priority=priority,
        )
        if self._observers:
            return await self._create_observed(new, connection)
        return (await self._writer.create_one(new, connection)).run

    async def trigger_default(self, task: TaskDef[Any] | str, payload: Any) -> Run:
        """``Runlane.trigger`` with every option at its default (:meth:`trigger`'s
        common call, in fewer steps)."""
        new = self._default_run(task, payload)
        if self._observers:
            return await self._create_observed(new, None)
        return (await self._writer.create_one(new, None)).run

    async def _create_observed(self, new: NewRun, connection: Any) -> Run:
        """Write ``new`` inside the observers' ``producing`` hook (its trace carrier, if
        it has none), telling them when it was created."""
        observers = self._observers
        with observers.producing(new.task_id, new.queue, 1) as carrier:
            if carrier is not None and new.trace_carrier is None:
                new = dataclasses.replace(new, trace_carrier=carrier)
            outcome = await self._writer.create_one(new, connection)
            if outcome.created:
                observers.call("triggered", [outcome.run])
            return outcome.run

    def _default_run(self, task: TaskDef[Any] | str, payload: Any) -> NewRun:
        """:meth:`build_new_run` of a trigger with every option at its default: the
        task's plan (validated on its first such call, kept since) with the due time now.
        Such plans differ only in their due time (and the idempotency key's expiry
        that follows from it), and validating the options into a plan was over
        a third of building a lone trigger's run."""
        definition = self._registry.resolve_task(task)
        target = self._registry.queue_for(definition, None)
        kept = self._default_plans.get(id(definition))
        if kept is not None and kept[0] is definition and kept[1] is target:
            return kept[2].new_run_due(payload, self._clock.now())
        plan = self.plan_trigger(definition, source=_TRIGGERED)
        self._default_plans[id(definition)] = (definition, target, plan)
        return plan.new_run(payload)

    async def trigger_many(
        self,
        task: TaskDef[Any] | str,
        payloads: Sequence[Any],
        *,
        queue: QueueDef | str | None,
        delay: Duration | None,
        run_at: datetime | None,
        concurrency_key: str | None,
        trace_carrier: Mapping[str, str] | None,
        connection: Any,
        after: Sequence[Run | str] | None = None,
        on_failure: str = CANCEL,
        rate_key: str | Callable[[Any], str | None] | None = None,
        priority: int = DEFAULT_PRIORITY,
    ) -> list[Run]:
        """``Runlane.trigger_many``: every payload validated, then written in batches."""
        plan = self.plan_trigger(
            task,
            queue=queue,
            delay=delay,
            run_at=run_at,
            concurrency_key=concurrency_key,
            trace_carrier=trace_carrier,
            source=_TRIGGERED,
            after=after,
            on_failure=on_failure,
            rate_key=rate_key,
            priority=priority,
        )
        writer = self._writer
        # A streamed call validates each batch as storage asks for it; otherwise every
        # payload is validated before anything is written.
        streamed = writer.streams(plan, len(payloads), connection)
        prepared = None if streamed else plan.prepare(payloads)
        observers = self._observers
        if observers:
            with observers.producing(plan.task.id, plan.queue.name, len(payloads)) as carrier:
                if carrier is not None and plan.trace_carrier is None:
                    plan = dataclasses.replace(plan, trace_carrier=carrier)
                runs = await self._write_many(plan, payloads, prepared, connection)
                observers.call("triggered", runs)
                return runs
        return await self._write_many(plan, payloads, prepared, connection)

    async def _write_many(
        self, plan: TriggerPlan, payloads: Sequence[Any], prepared: Prepared | None, connection: Any
    ) -> list[Run]:
        if prepared is None:
            return await self._writer.create_stream(plan, payloads)
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
        after: Sequence[Run | str] | None = None,
        on_failure: str = CANCEL,
        rate_key: str | Callable[[Any], str | None] | None = None,
        priority: int = DEFAULT_PRIORITY,
    ) -> TriggerPlan:
        """Validate the payload-independent options of a call; nothing is written here."""
        definition = self._registry.resolve_task(task)
        plan = plan_trigger(
            definition,
            self._registry.queue_for(definition, queue),
            now=self._clock.now(),
            source=source,
            max_payload_bytes=self._max_payload_bytes,
            transport=self._transport,
            delay=delay,
            run_at=run_at,
            idempotency_key=idempotency_key,
            singleton_key=singleton_key,
            concurrency_key=concurrency_key,
            trace_carrier=trace_carrier,
            rate_key=rate_key,
            priority=priority,
        )
        if after is None and on_failure is CANCEL:
            return plan  # no dependencies: the plan every trigger without after= takes
        return self._with_dependencies(plan, after, on_failure)

    def _with_dependencies(
        self, plan: TriggerPlan, after: Sequence[Run | str] | None, on_failure: str
    ) -> TriggerPlan:
        """``plan`` for runs that wait for ``after`` (checked; none: ``plan`` itself)."""
        policy = validate_on_failure(on_failure)
        ids = dependency_ids(after, self._writer.environment) if after is not None else ()
        if not ids:
            return plan
        self._writer.require_dependencies()
        if plan.singleton_key is not None:
            # A waiting run is not counted by the singleton rule's index of active runs.
            raise configuration_error(
                "a run with dependencies (after=) cannot have a singleton_key."
            )
        fields = {field.name: getattr(plan, field.name) for field in dataclasses.fields(plan)}
        fields["status"] = RunStatus.WAITING
        # Written when the dependencies release the run, if it is due then.
        fields["request_delivery"] = (
            self._transport
            and plan.queue.concurrency_limit is None
            and plan.source.type is not RunSourceType.RUN_NOW
        )
        return WaitingPlan(**fields, after=ids, on_failure=policy)

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
        after: Sequence[Run | str] | None = None,
        on_failure: str = CANCEL,
        rate_key: str | None = None,
        priority: int = DEFAULT_PRIORITY,
    ) -> NewRun:
        """Validate everything about one run to create; nothing is written here."""
        return self.plan_trigger(
            task,
            source=source,
            queue=queue,
            delay=delay,
            run_at=run_at,
            idempotency_key=idempotency_key,
            singleton_key=singleton_key,
            concurrency_key=concurrency_key,
            trace_carrier=trace_carrier,
            after=after,
            on_failure=on_failure,
            rate_key=rate_key,
            priority=priority,
        ).new_run(payload)

    async def create_child_run(
        self, source: Run, source_type: RunSourceType, queue: QueueDef | str | None
    ) -> Run:
        """A new run of ``source``'s task and payload, linked to it (rerun, manual retry),
        with its priority."""
        target = self._registry.queue_for(
            self._registry.resolve_task(source.task_id), queue or source.queue
        )
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
            # Its partition too, when the queue it goes to is limited per key.
            rate_key=(source.rate_key or None) if target.rate_limit_by is not None else None,
            priority=source.priority,
        )
        with self._observers.producing(new.task_id, new.queue, 1):
            # The parent's carrier is kept: the new run continues the parent's trace.
            (outcome,) = await self._writer.create([new])
            if self._observers:
                self._observers.call("triggered", [outcome.run])
        return outcome.run
