"""Publishing messages to stored topics (contract 5.4): ``rl.publish``.

:class:`Publisher` is the topics' producer service, beside
:class:`runlane.core.producing.Producer` for runs. It validates a publish
without storage (:func:`runlane.topics.publishing.validate_publish`, checks
1-5), hands the message and its planned deliveries to storage in one
transaction (the ``connection`` kind, deduplication and message-id reuse are
checked there, before anything is written), and on a transport lane publishes
the deliveries' wakeups right after commit, as ``trigger`` does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime, timedelta
from typing import Any

from runlane.core.dispatch import OUTBOX_CLAIM_WINDOW, Dispatcher
from runlane.core.ids import new_run_id
from runlane.core.observing import Observers
from runlane.core.store import StoreScope
from runlane.topics.definitions import TopicDef
from runlane.topics.publishing import ValidatedPublish, canonical_envelope, validate_publish
from runlane.topics.records import PublishReceipt
from runlane.topics.registration import TopicRegistry
from runlane.types.records import NewDelivery, NewMessage, PublishOutcome


class Publisher:
    """Publishes messages of ``topics`` through ``store``.

    ``dispatcher`` (a transport lane) and ``eager_dispatch`` decide whether the
    deliveries' wakeups go out right after commit; ``opened`` connects the lane;
    ``on_created`` wakes this process's idle workers; ``observers`` see the
    delivery runs as produced runs.
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
    ) -> None:
        self._topics = topics
        self._store = store
        self._observers = observers
        self._dispatcher = dispatcher
        self._eager = eager_dispatch
        self._opened = opened
        self._on_created = on_created
        self._max_payload_bytes = max_payload_bytes

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
        """``Runlane.publish``: validate, then store the message and its deliveries."""
        store = self._store
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
        await self._opened()
        store = self._store
        now = store.now()
        # Inside the caller's transaction nothing may be published before it commits,
        # so those wakeups wait in the outbox for tick.
        dispatcher = self._dispatcher
        publish_now = dispatcher is not None and self._eager and connection is None
        (outcome,) = await store.messages().publish_messages(
            store.environment,
            [new_message(checked, now, transport=dispatcher is not None)],
            now,
            connection=connection,
            outbox_claimed_until=now + OUTBOX_CLAIM_WINDOW if publish_now else None,
        )
        if outcome.runs and not outcome.duplicate:
            self._on_created()
        if publish_now and dispatcher is not None and outcome.outbox:
            await dispatcher.publish(list(outcome.outbox))
        return outcome


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
        envelope=canonical_envelope(message.topic, checked.payload_json, message.attributes),
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
