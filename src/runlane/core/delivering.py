"""One attempt of a delivery run: its subscription's handler with the message.

A delivery run is a run whose ``task_id`` is a subscription's name. The attempt
runner leases, heartbeats, times and cancels it as it does a task's run; this
module supplies what differs: the handler and its arguments (the topic schema
checked again, the :class:`Message` read back, a :class:`DeliveryContext`), and
the settle, where :func:`runlane.topics.outcomes.decide_delivery` maps the end
of the attempt and the retry budget to the delivery's next status.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from runlane.core.attempt_outcomes import time_limit_message
from runlane.core.store import StoreScope
from runlane.model.context import Release, Signal
from runlane.model.handler_calls import HandlerEnds
from runlane.model.payloads import payload_for_handler
from runlane.model.transitions import Released, sanitize_exception
from runlane.topics.constants import DEFAULT_SUBSCRIPTION_RETRY
from runlane.topics.definitions import SubscriptionDef
from runlane.topics.messages import DeliveryContext, Message
from runlane.topics.outcomes import decide_delivery
from runlane.topics.publishing import payload_owner
from runlane.topics.states import delivery_state, expire_delivery_lease, settle_delivery
from runlane.types.errors import ErrorCode, RunlaneError
from runlane.types.records import Transition
from runlane.types.retry import RetryPolicy
from runlane.types.runs import Run, RunFailure


@dataclass(frozen=True, slots=True)
class Ended:
    """How a delivery handler's attempt ended: the value it returned, or (``raised``)
    the exception it raised. Settled by :func:`settle_delivery_attempt`."""

    value: object
    raised: bool


#: What a delivery attempt ends with: the handler's end, or a release (worker shutdown).
HandlerEnd = Ended | Released


def _returned(run: Run, value: Any) -> Ended:
    return Ended(value, raised=False)


def _raised(run: Run, error: BaseException) -> Ended:
    return Ended(error, raised=True)


def _timed_out(run: Run, time_limit: float) -> Ended:
    timeout = RunlaneError(
        ErrorCode.TASK_TIMEOUT, time_limit_message(run, time_limit), retryable=True
    )
    return Ended(timeout, raised=True)


#: A subscription handler's end, undigested (:func:`decide_delivery` reads it when it
#: settles), for :func:`runlane.model.handler_calls.call_handler`.
DELIVERY_ENDS: HandlerEnds[Run, Ended] = HandlerEnds(
    returned=_returned, raised=_raised, timed_out=_timed_out
)


@dataclass(frozen=True, slots=True)
class HandlerCall:
    """A subscription handler ready to call: the function, how, and its arguments."""

    fn: Callable[..., Any]
    is_async: bool
    #: The subscription's per-attempt limit in seconds (``None``: none).
    timeout: float | None
    args: tuple[Message[Any], DeliveryContext]


class Subscriptions:
    """The registered subscriptions, as the attempt runner calls them."""

    def __init__(self, store: StoreScope, subscriptions: Mapping[str, SubscriptionDef]) -> None:
        """Read messages through ``store``; run the handlers of ``subscriptions``."""
        self._store = store
        self._subscriptions = subscriptions

    def policy(self, run: Run) -> RetryPolicy:
        """The retry budget of ``run``'s subscription (the default one if unregistered)."""
        sub = self._subscriptions.get(run.task_id)
        return sub.retry if sub is not None else DEFAULT_SUBSCRIPTION_RETRY

    async def prepare(
        self, run: Run, signal: Signal, heartbeat: Callable[[], Awaitable[None]]
    ) -> HandlerCall | Ended:
        """The handler call of the attempt ``run`` is leased for, or how the attempt
        ends without one (an unregistered subscription, a payload the schema refuses)."""
        sub = self._subscriptions.get(run.task_id)
        if sub is None:
            return Ended(
                RunlaneError(
                    ErrorCode.TASK_NOT_FOUND,
                    f"Subscription {run.task_id!r} is not registered in this worker.",
                    retryable=True,
                ),
                raised=True,
            )
        try:
            payload = payload_for_handler(payload_owner(sub.topic), run.payload)
        except RunlaneError as error:
            return Ended(RunlaneError(error.code, error.message, meta=error.meta), raised=True)
        message_id = run.source.message_id or ""
        store = self._store
        found = await store.messages().get_messages(store.environment, [message_id])
        stored = found.get(message_id)
        if stored is None:
            return Ended(
                RunlaneError(
                    ErrorCode.PAYLOAD_INVALID,
                    f"the message {message_id!r} of this delivery is no longer stored.",
                ),
                raised=True,
            )
        message: Message[Any] = Message(
            id=stored.id,
            topic=stored.topic,
            payload=payload,
            attributes=stored.attributes,
            published_at=stored.published_at,
            sequence=stored.sequence,
        )
        lease = run.lease
        assert lease is not None
        ctx = DeliveryContext(
            run_id=run.id,
            subscription=sub.name,
            queue=run.queue,
            attempt=run.attempt,
            signal=signal,
            trace_carrier=run.trace_carrier,
            heartbeat=heartbeat,
            worker_id=lease.owner,
            topic=stored.topic,
            message_id=stored.id,
            key=run.partition_key,
            is_replay=run.replays > 0,
            max_attempts=sub.retry.max_attempts,
        )
        return HandlerCall(sub.handler, sub.is_async, sub.timeout, (message, ctx))


def settle_delivery_attempt(
    run: Run,
    outcome: HandlerEnd,
    policy: RetryPolicy,
    now: datetime,
    describe: Callable[[BaseException], RunFailure] = sanitize_exception,
) -> Transition:
    """The transition that ends the attempt the leased delivery ``run`` is in (5.5.1, 5.6)."""
    if isinstance(outcome, Released):
        ended: object = Release(outcome.delay, outcome.reason)
        raised = False
    else:
        ended, raised = outcome.value, outcome.raised
    decision = decide_delivery(
        ended,
        raised=raised,
        failures_so_far=run.failure_count,
        policy=policy,
        describe=describe,
    )
    return settle_delivery(delivery_state(run), decision, now)


def expire_delivery(run: Run, policy: RetryPolicy, now: datetime) -> Transition:
    """Maintenance found the delivery's lease expired: retry while the budget lasts,
    else dead-letter with ``lease_expired`` (a cancelled one ends CANCELLED)."""
    return expire_delivery_lease(delivery_state(run), now, policy)
