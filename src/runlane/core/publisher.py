"""Publishing messages to stored topics (contract 5.4): ``rl.publish``.

:class:`Publisher` is the topics' producer service, beside
:class:`runlane.core.producing.Producer` for runs. It validates a publish
without storage (:func:`runlane.topics.publishing.validate_publish`, checks
1-5), hands the message and its planned deliveries to storage in one
transaction (the ``connection`` kind, deduplication and message-id reuse are
checked there, before anything is written), and on a transport lane publishes
the deliveries' wakeups right after commit, as ``trigger`` does.

Concurrent publishes outside a caller's transaction share one storage write (and
one commit), as concurrent ``trigger`` calls do: the first writes at once, those
arriving meanwhile join the next write, and a lone publish never waits. A
message whose deliveries have keys is written alone: one transaction then takes
only its own (sorted) key locks, so two writes cannot wait on each other's keys.
If a shared write fails (a reused message id refuses the whole write), each of
its publishes is written again alone, so only the one at fault fails.
"""

from __future__ import annotations

import asyncio
import dataclasses
import weakref
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from runlane.core.brokered import BrokeredTopics
from runlane.core.dispatch import OUTBOX_CLAIM_WINDOW, Dispatcher
from runlane.core.observing import Observers
from runlane.core.store import StoreScope
from runlane.model.queue_defs import UNKEYED
from runlane.topics.definitions import TopicDef
from runlane.topics.publishing import ValidatedPublish, envelope_of, validate_publish
from runlane.topics.records import PublishReceipt
from runlane.topics.registration import TopicRegistry
from runlane.types.ids import new_run_id
from runlane.types.records import NewDelivery, NewMessage, PublishOutcome

#: The most messages one shared write carries.
MAX_PUBLISH_GROUP = 200

WriteMany = Callable[[Sequence[ValidatedPublish]], Awaitable[list[PublishOutcome]]]


class PublishGroups:
    """Group commit for concurrent publishes (see the module docstring); one per
    event loop."""

    def __init__(self, write: WriteMany) -> None:
        self._write = write
        self._waiting: list[tuple[ValidatedPublish, asyncio.Future[PublishOutcome]]] = []
        self._writer: asyncio.Task[None] | None = None

    async def publish(self, checked: ValidatedPublish) -> PublishOutcome:
        """Write ``checked`` with whatever other publishes are waiting; its outcome.

        A caller cancelled before its group is written publishes nothing.
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[PublishOutcome] = loop.create_future()
        self._waiting.append((checked, future))
        if self._writer is None or self._writer.done():
            self._writer = loop.create_task(self._drain())
        return await future

    async def _drain(self) -> None:
        while self._waiting:
            group = [entry for entry in self._waiting[:MAX_PUBLISH_GROUP] if not entry[1].done()]
            del self._waiting[:MAX_PUBLISH_GROUP]
            if not group:
                continue
            try:
                outcomes = await self._write([checked for checked, _ in group])
            except Exception as error:
                if len(group) == 1:
                    _settle(group[0][1], error=error)
                    continue
                # One publish may have refused the shared write: each alone now.
                for checked, future in group:
                    if future.done():
                        continue
                    try:
                        (alone,) = await self._write([checked])
                    except Exception as single:
                        _settle(future, error=single)
                    else:
                        _settle(future, outcome=alone)
                continue
            except BaseException:
                for _, future in group:
                    future.cancel()
                raise
            for (_, future), outcome in zip(group, outcomes, strict=True):
                _settle(future, outcome=outcome)


def _settle(
    future: asyncio.Future[PublishOutcome],
    *,
    outcome: PublishOutcome | None = None,
    error: Exception | None = None,
) -> None:
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        assert outcome is not None
        future.set_result(outcome)


class Publisher:
    """Publishes messages of ``topics`` through ``store``.

    ``dispatcher`` (a transport lane) and ``eager_dispatch`` decide whether the
    deliveries' wakeups go out right after commit; ``opened`` connects the lane;
    ``on_created`` wakes this process's idle workers; ``observers`` see the
    delivery runs as produced runs. Topics of ``brokered`` go to its transport.
    """

    def __init__(
        self,
        topics: TopicRegistry,
        store: StoreScope,
        observers: Observers,
        *,
        dispatcher: Dispatcher | None,
        eager_dispatch: bool,
        opened: Callable[[], Awaitable[None]],
        on_created: Callable[[], None],
        max_payload_bytes: int,
        brokered: BrokeredTopics | None = None,
    ) -> None:
        self._topics = topics
        self._brokered = brokered
        self._store = store
        self._observers = observers
        self._dispatcher = dispatcher
        self._eager = eager_dispatch
        self._opened = opened
        self._on_created = on_created
        self._max_payload_bytes = max_payload_bytes
        #: Group commit per event loop (``rl.sync`` runs its own loop beside the app's).
        self._groups: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, PublishGroups] = (
            weakref.WeakKeyDictionary()
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
        """``Runlane.publish``: validate, then store the message and its deliveries (or,
        for a brokered topic, hand it to the topic transport)."""
        store = self._store
        brokered = self._brokered
        if brokered is not None and brokered.carries(topic):
            await self._opened()
            return await brokered.publish(
                topic,
                payload,
                environment=store.environment,
                now=store.now(),
                attributes=attributes,
                message_id=message_id,
                deduplication_key=deduplication_key,
                trace_carrier=trace_carrier,
                connection=connection,
                max_payload_bytes=self._max_payload_bytes,
            )
        checked = validate_publish(
            self._topics,
            topic,
            payload,
            attributes=attributes,
            message_id=message_id,
            deduplication_key=deduplication_key,
            trace_carrier=trace_carrier,
            now=store.now(),
            max_payload_bytes=self._max_payload_bytes,
        )
        observers = self._observers
        if observers and checked.deliveries:
            # The deliveries are runs this call produces: one producing span for them.
            first = checked.deliveries[0]
            count = len(checked.deliveries)
            with observers.producing(first.subscription.name, first.queue.name, count) as carrier:
                if carrier is not None and checked.trace_carrier is None:
                    checked = dataclasses.replace(checked, trace_carrier=dict(carrier))
                outcome = await self._write(checked, connection)
                if not outcome.duplicate:
                    observers.call("triggered", outcome.runs)
        else:
            outcome = await self._write(checked, connection)
        return receipt(outcome)

    async def _write(self, checked: ValidatedPublish, connection: Any) -> PublishOutcome:
        if connection is None and not checked.lock_keys:
            loop = asyncio.get_running_loop()
            groups = self._groups.get(loop)
            if groups is None:
                groups = self._groups[loop] = PublishGroups(self._write_many)
            return await groups.publish(checked)
        (outcome,) = await self._write_many([checked], connection=connection)
        return outcome

    async def _write_many(
        self, publishes: Sequence[ValidatedPublish], connection: Any = None
    ) -> list[PublishOutcome]:
        """Publish in one storage write; on a transport lane send the wakeups after it."""
        await self._opened()
        store = self._store
        now = store.now()
        # Inside the caller's transaction nothing may be published before it commits,
        # so those wakeups wait in the outbox for tick.
        dispatcher = self._dispatcher
        publish_now = dispatcher is not None and self._eager and connection is None
        transport = dispatcher is not None
        outcomes = await store.messages().publish_messages(
            store.environment,
            [new_message(checked, now, transport=transport) for checked in publishes],
            now,
            connection=connection,
            outbox_claimed_until=now + OUTBOX_CLAIM_WINDOW if publish_now else None,
        )
        if any(outcome.runs and not outcome.duplicate for outcome in outcomes):
            self._on_created()
        if publish_now and dispatcher is not None:
            wakeups = [message for outcome in outcomes for message in outcome.outbox]
            if wakeups:
                await dispatcher.publish(wakeups)
        return outcomes


def new_message(checked: ValidatedPublish, now: datetime, *, transport: bool) -> NewMessage:
    """The storage record of a validated publish at ``now``. On a transport lane each
    delivery on a queue without a concurrency limit asks for a wakeup (storage writes
    it only while the delivery's key lets it run)."""
    message = checked.message
    ids = new_run_id.many(len(checked.deliveries))
    return NewMessage(
        id=message.id,
        topic=message.topic,
        payload=checked.payload_json,
        payload_json=checked.payload_text,
        attributes=dict(message.attributes),
        envelope=envelope_of(checked),
        window_ends_at=now + timedelta(seconds=checked.topic.deduplication_window),
        deduplication_key=checked.deduplication_key,
        trace_carrier=checked.trace_carrier,
        deliveries=tuple(
            NewDelivery(
                run_id=run_id,
                subscription=planned.subscription.name,
                queue=planned.queue.name,
                mode=planned.mode,
                partition_key=planned.key,
                request_delivery=transport and planned.queue.concurrency_limit is None,
                # A keyed queue limits each message key apart; keyless ones share ''.
                rate_key=(planned.key or UNKEYED) if planned.queue.rate_limit_by else None,
            )
            for run_id, planned in zip(ids, checked.deliveries, strict=True)
        ),
    )


def receipt(outcome: PublishOutcome) -> PublishReceipt:
    """What ``rl.publish`` returns for one stored message."""
    message = outcome.message
    return PublishReceipt(
        message_id=message.id,
        topic=message.topic,
        duplicate=outcome.duplicate,
        runs=list(outcome.runs),
        published_at=message.published_at,
        sequence=message.sequence,
    )
