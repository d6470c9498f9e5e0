"""Operator calls on topics: ``rl.dead_letters`` and ``rl.subscriptions``
(contract 5.8, 5.9; for subscriptions of SNS topics, 5.11.5 and 5.11.7 through
:class:`runlane.core.brokered.BrokeredTopics`).

Replay and discard are compare-and-set transitions computed by the delivery
state machine (:mod:`runlane.topics.states`): of two operators acting on one
dead letter at once, one wins and the other gets ``INVALID_STATE``. Their
arguments are checked before anything is read.
"""

from __future__ import annotations

import builtins
from collections.abc import Awaitable, Callable
from typing import Any

from runlane.core.brokered import BrokeredTopics, without_subscription
from runlane.core.store import StoreScope
from runlane.model.transitions import project
from runlane.topics.definitions import SubscriptionDef, SubscriptionMode, TopicDef
from runlane.topics.messages import Message
from runlane.topics.records import DeadLetter, SubscriptionStats
from runlane.topics.registration import TopicRegistry
from runlane.topics.states import (
    check_operator_reason,
    delivery_state,
    discard_dead_letter,
    replay_dead_letter,
)
from runlane.types.errors import ErrorCode, RunlaneError, configuration_error
from runlane.types.ids import could_be_run_id, validate_optional_identifier
from runlane.types.records import (
    DeadLetterFilter,
    HaltedKey,
    StoredDeadLetter,
    StoredMessage,
    Transition,
)
from runlane.types.runs import Page, Run, RunStatus

#: Connects the lane (``Runlane.open``): safe to call more than once.
Connect = Callable[[], Awaitable[None]]

DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 1000


def _check_limit(limit: object) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE_SIZE:
        raise configuration_error(f"limit must be a whole number from 1 to {MAX_PAGE_SIZE}.")
    return limit


def _check_cursor(cursor: object) -> str | None:
    if cursor is not None and not isinstance(cursor, str):
        raise configuration_error(
            "cursor must be a page's next_cursor, passed back unchanged (or None)."
        )
    return cursor


def _not_found(dead_letter_id: object, why: str) -> RunlaneError:
    shown = repr(dead_letter_id) if len(repr(dead_letter_id)) <= 300 else "the given id"
    return RunlaneError(
        ErrorCode.DEAD_LETTER_NOT_FOUND,
        f"no dead letter {shown} in this environment: {why}.",
        meta={"dead_letter_id": dead_letter_id if isinstance(dead_letter_id, str) else None},
    )


def dead_letter(stored: StoredDeadLetter) -> DeadLetter:
    """A stored dead letter as ``rl.dead_letters`` returns it."""
    run = stored.run
    return DeadLetter(
        id=run.id,
        subscription=run.task_id,
        topic=stored.message.topic,
        key=run.partition_key,
        reason=run.dead_letter_reason or "",
        failure=run.failure,
        attempt=run.attempt,
        replays=run.replays,
        dead_lettered_at=run.dead_lettered_at or run.updated_at,
        blocks_key=stored.blocks_key,
        message=_message(stored.message),
    )


def _message(stored: StoredMessage) -> Message[Any]:
    return Message(
        id=stored.id,
        topic=stored.topic,
        payload=stored.payload,
        attributes=stored.attributes,
        published_at=stored.published_at,
        sequence=stored.sequence,
    )


class DeadLetters:
    """``rl.dead_letters``: list, read, replay and discard dead letters.

    A subscription of an SNS topic keeps its dead letters in its SQS dead-letter
    queue: pass ``subscription=`` to reach them (a best-effort scan, one page), and
    ``replay`` / ``discard`` return ``None`` there.
    """

    def __init__(
        self,
        store: StoreScope,
        topics: TopicRegistry,
        connect: Connect,
        *,
        brokered: BrokeredTopics | None = None,
    ) -> None:
        """Act on dead letters in ``store`` of the topics in ``topics``, and through
        ``brokered`` on those of its subscriptions, after ``connect``."""
        self._store = store
        self._topics = topics
        self._connect = connect
        self._brokered = brokered

    def _brokered_for(self, subscription: object) -> tuple[BrokeredTopics, SubscriptionDef] | None:
        """The broker and definition of an SNS ``subscription``; ``None`` for any other."""
        brokered = self._brokered
        if brokered is not None and brokered.carries_subscription(subscription):
            return brokered, brokered.resolve_subscription(subscription)
        return None

    async def list(
        self,
        *,
        topic: TopicDef | str | None = None,
        subscription: SubscriptionDef | str | None = None,
        key: str | None = None,
        limit: int = DEFAULT_PAGE_SIZE,
        cursor: str | None = None,
    ) -> Page[DeadLetter]:
        """Deliveries dead-lettered now, oldest dead letter first, filtered by every
        filter given; pass ``page.next_cursor`` back for the next page.

        Without ``subscription=`` only stored topics are listed; an SNS topic's dead
        letters are listed per subscription (``topic=`` alone is ``CONFIGURATION_INVALID``).
        """
        brokered = self._brokered
        on_broker = self._brokered_for(subscription)
        if brokered is not None and (on_broker is not None or brokered.carries(topic)):
            topic_name: str | None = None
            if topic is not None:
                topic_name = (
                    brokered.resolve_topic(topic).name
                    if brokered.carries(topic)
                    else self._topics.resolve_topic(topic).name
                )
            if subscription is None:
                raise without_subscription(str(topic_name))
            if key is not None and not isinstance(key, str):
                raise configuration_error(
                    f"key must be a string or None, got {type(key).__name__}."
                )
            checked_limit = _check_limit(limit)
            checked_cursor = _check_cursor(cursor)
            if on_broker is None:
                # A stored subscription has no dead letters of an SNS topic.
                self._topics.resolve_subscription(subscription)
                return Page([], None)
            await self._connect()
            return await brokered.list_dead_letters(
                on_broker[1],
                topic=topic_name,
                key=key,
                limit=checked_limit,
                cursor=checked_cursor,
            )
        store = self._store
        store.require("stores_messages")
        topic_name = self._topics.resolve_topic(topic).name if topic is not None else None
        sub_name = (
            self._topics.resolve_subscription(subscription).name
            if subscription is not None
            else None
        )
        if key is not None and not isinstance(key, str):
            raise configuration_error(f"key must be a string or None, got {type(key).__name__}.")
        checked_limit = _check_limit(limit)
        checked_cursor = _check_cursor(cursor)
        await self._connect()
        page = await store.messages().list_dead_letters(
            store.environment,
            DeadLetterFilter(topic=topic_name, subscription=sub_name, partition_key=key),
            checked_limit,
            checked_cursor,
        )
        return Page([dead_letter(item) for item in page.data], page.next_cursor)

    async def get(
        self, id: str, *, subscription: SubscriptionDef | str | None = None
    ) -> DeadLetter:
        """The delivery ``id`` if it is dead-lettered now, else ``DEAD_LETTER_NOT_FOUND``
        (of an SNS subscription: the dead letter ``id`` found by one scan of its DLQ)."""
        on_broker = self._brokered_for(subscription)
        if on_broker is not None:
            await self._connect()
            return await on_broker[0].get_dead_letter(id, on_broker[1])
        run = await self._delivery(id, subscription)
        if run.status is not RunStatus.DEAD_LETTERED:
            raise _not_found(id, f"the delivery is {run.status.value}")
        store = self._store
        page = await store.messages().list_dead_letters(
            store.environment, DeadLetterFilter(run_id=run.id), 1, None
        )
        if not page.data:
            raise _not_found(id, "it was resolved while being read")
        return dead_letter(page.data[0])

    async def replay(
        self,
        id: str,
        *,
        reason: str | None = None,
        actor: str | None = None,
        subscription: SubscriptionDef | str | None = None,
    ) -> Run | None:
        """Queue the dead letter again: same run, fresh retry budget, same place in its
        key's order; ``run.replayed`` records ``reason`` and ``actor``.

        On an SNS subscription the message goes back to its SQS queue and this
        returns ``None``."""
        on_broker = self._brokered_for(subscription)
        if on_broker is not None:
            await self._connect()
            await on_broker[0].replay(id, on_broker[1], reason=reason, actor=actor)
            return None
        check_operator_reason(reason, required=False, action="replay")
        validate_optional_identifier(actor, name="actor")
        store = self._store
        run = await self._delivery(id, subscription)
        now = store.now()
        return await self._apply(
            run, replay_dead_letter(delivery_state(run), now, reason=reason, actor=actor)
        )

    async def discard(
        self,
        id: str,
        *,
        reason: str,
        actor: str | None = None,
        subscription: SubscriptionDef | str | None = None,
    ) -> Run | None:
        """Give up on the dead letter (DISCARDED, terminal); an ORDERED key moves on.
        ``run.discarded`` records ``reason`` (required) and ``actor``.

        On an SNS subscription the copy is deleted from its DLQ and this returns ``None``."""
        on_broker = self._brokered_for(subscription)
        if on_broker is not None:
            await self._connect()
            await on_broker[0].discard(id, on_broker[1], reason=reason, actor=actor)
            return None
        check_operator_reason(reason, required=True, action="discard")
        validate_optional_identifier(actor, name="actor")
        run = await self._delivery(id, subscription)
        return await self._apply(
            run, discard_dead_letter(delivery_state(run), reason=reason, actor=actor)
        )

    async def _apply(self, run: Run, transition: Transition) -> Run:
        store = self._store
        now = store.now()
        (applied,) = await store.storage.apply_transitions(store.environment, [transition], now)
        if applied:
            return project(run, transition, now)
        # Another operator (or a claim) changed it since it was read: compare-and-set lost.
        fresh = await store.storage.get_run(store.environment, run.id)
        status = fresh.status.value if fresh is not None else "gone"
        raise RunlaneError(
            ErrorCode.INVALID_STATE,
            f"delivery {run.id} changed while this call acted on it (now {status}); read it again.",
            meta={"run_id": run.id, "status": status},
        )

    async def _delivery(self, id: object, subscription: object) -> Run:
        """The delivery run ``id`` (of ``subscription`` when given), or not found."""
        store = self._store
        store.require("stores_messages")
        expected = (
            self._topics.resolve_subscription(subscription).name
            if subscription is not None
            else None
        )
        if not isinstance(id, str) or not could_be_run_id(id):
            raise _not_found(id, "it is not a delivery run id")
        await self._connect()
        run = await store.storage.get_run(store.environment, id)
        if run is None or run.mode is None:
            raise _not_found(id, "no delivery run has this id")
        if expected is not None and run.task_id != expected:
            raise _not_found(id, f"it is a delivery of {run.task_id!r}, not of {expected!r}")
        return run


class SubscriptionOperations:
    """``rl.subscriptions``: deliveries per status and halted keys of each subscription."""

    def __init__(
        self,
        store: StoreScope,
        topics: TopicRegistry,
        connect: Connect,
        *,
        brokered: BrokeredTopics | None = None,
    ) -> None:
        """Count deliveries in ``store`` of the subscriptions in ``topics`` (and read the
        queues of ``brokered``'s), after ``connect``."""
        self._store = store
        self._topics = topics
        self._connect = connect
        self._brokered = brokered

    async def list(self) -> builtins.list[SubscriptionStats]:
        """Every registered subscription's stats, by name (SNS ones ``approximate``)."""
        stats = await self._stats(sorted(self._topics.subscriptions))
        brokered = self._brokered
        if brokered is not None and brokered.subscriptions:
            await self._connect()
            for name in brokered.subscriptions:
                stats.append(await brokered.stats(name))
            stats.sort(key=lambda item: item.name)
        return stats

    async def get(self, subscription: SubscriptionDef | str) -> SubscriptionStats:
        """One subscription's stats; ``SUBSCRIPTION_NOT_FOUND`` if it is not registered.

        An SNS subscription's are read from its queues' approximate numbers
        (``approximate=True``, no counts per status, ``queue=None``)."""
        brokered = self._brokered
        if brokered is not None and brokered.carries_subscription(subscription):
            await self._connect()
            return await brokered.stats(subscription)
        (stats,) = await self._stats([self._topics.resolve_subscription(subscription).name])
        return stats

    async def halted_keys(
        self,
        subscription: SubscriptionDef | str,
        *,
        limit: int = DEFAULT_PAGE_SIZE,
        cursor: str | None = None,
    ) -> Page[HaltedKey]:
        """ORDERED keys whose head is dead-lettered, by key (always empty for other modes,
        and on SNS, which has no ORDERED subscriptions)."""
        brokered = self._brokered
        if brokered is not None and brokered.carries_subscription(subscription):
            brokered.resolve_subscription(subscription)
            _check_limit(limit)
            _check_cursor(cursor)
            return Page([], None)
        store = self._store
        store.require("stores_messages")
        sub = self._topics.resolve_subscription(subscription)
        checked_limit = _check_limit(limit)
        checked_cursor = _check_cursor(cursor)
        if sub.mode is not SubscriptionMode.ORDERED:
            return Page([], None)
        await self._connect()
        page: Page[HaltedKey] = await store.messages().list_halted_keys(
            store.environment, sub.name, checked_limit, checked_cursor
        )
        return page

    async def _stats(self, names: builtins.list[str]) -> builtins.list[SubscriptionStats]:
        store = self._store
        store.require("stores_messages")
        await self._connect()
        counted = await store.messages().subscription_stats(store.environment, names)
        stats = []
        for name, counts in zip(names, counted, strict=True):
            sub = self._topics.subscriptions[name]
            stats.append(
                SubscriptionStats(
                    name=name,
                    topic=sub.topic.name,
                    mode=sub.mode,
                    queue=self._topics.queues[name].name,
                    counts=dict(counts.counts),
                    halted_keys=counts.halted_keys,
                )
            )
        return stats
