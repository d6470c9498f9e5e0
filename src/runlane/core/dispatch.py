"""Dispatch on transport lanes: delivery requests, the outbox, and publishing wakeups."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import timedelta

from runlane.core.queue_pauses import PausedQueues
from runlane.core.store import StoreScope
from runlane.model.queue_defs import QueueDef
from runlane.ports.transport import (
    DeliveryMessage,
    PublishFailure,
    PublishOutcome,
    Transport,
    WakeupAttempt,
    WakeupFailed,
    WakeupPublished,
)
from runlane.types.errors import ErrorCode, RunlaneError, configuration_error
from runlane.types.records import OutboxMessage, OutboxResult, QueuePolicy

logger = logging.getLogger("runlane.dispatch")

#: A claimed outbox message is re-claimable after this long (a publisher crashed).
OUTBOX_CLAIM_WINDOW = timedelta(seconds=30)
#: Outbox messages published per batch by ``tick``.
OUTBOX_BATCH = 100
#: Delivery requests appended per tick pass.
DELIVERY_REQUEST_BATCH = 1000
#: A failed publish is retried after this long, doubling per attempt up to the cap.
OUTBOX_RETRY_INITIAL = 1.0
OUTBOX_RETRY_MAX = 300.0


def check_transport_bindings(transport: Transport, queues: Sequence[QueueDef]) -> None:
    """Every registered queue needs a binding with the same policy on the transport."""
    if not isinstance(transport, Transport):
        raise configuration_error(
            f"transport {type(transport).__name__} does not implement the transport protocol."
        )
    bound = {q.name: q for q in transport.queues}
    missing = [q.name for q in queues if q.name not in bound]
    if missing:
        raise configuration_error(
            f"transport {transport.name!r} has no binding for queues {missing}; "
            "bind every registered queue.",
            missing=missing,
        )
    for definition in queues:
        if bound[definition.name] != definition:
            raise RunlaneError(
                ErrorCode.QUEUE_POLICY_DRIFT,
                f"transport {transport.name!r} binds queue {definition.name!r} with a different "
                "policy than the registry; share one queue definition.",
                meta={"queue": definition.name},
            )


class Dispatcher:
    """Publishes outbox messages through the lane's transport."""

    def __init__(
        self,
        store: StoreScope,
        transport: Transport,
        queues: Sequence[QueueDef],
        lease_duration: float,
        pauses: PausedQueues,
    ) -> None:
        self._store = store
        self.transport = transport
        self._pauses = pauses
        # A bounded queue's reservation lasts its dispatch timeout, else one lease.
        self._policies = [
            QueuePolicy(
                q.name,
                q.concurrency_limit,
                (q.dispatch_timeout or lease_duration) if q.concurrency_limit else None,
                q.rate_limit,
                q.rate_limit_by is not None,
                q.priority_window,
            )
            for q in queues
        ]

    def policies(self) -> list[QueuePolicy]:
        """Queue policies with each bounded queue's reservation window."""
        return list(self._policies)

    async def publish(self, messages: Sequence[OutboxMessage]) -> tuple[int, int]:
        """Publish claimed messages and record each outcome; return (published, failed)."""
        if not messages:
            return 0, 0
        store = self._store
        attempts = [
            WakeupAttempt(
                DeliveryMessage(
                    store.environment, m.run_id, m.queue, m.requested_at, m.trace_carrier
                ),
                m.id,
            )
            for m in messages
        ]
        outcomes: Sequence[PublishOutcome]
        try:
            outcomes = await self.transport.publish_wakeups(attempts)
            if len(outcomes) != len(attempts):
                raise RunlaneError(
                    ErrorCode.ADAPTER_CONTRACT_VIOLATION,
                    f"transport {self.transport.name!r} returned {len(outcomes)} outcomes "
                    f"for {len(attempts)} wakeups.",
                )
        except RunlaneError as error:
            logger.warning(
                "publishing %d wakeups failed: %s",
                len(attempts),
                error,
                extra={
                    "event": "outbox.publish_failed",
                    "error_code": error.code.value,
                    "count": len(attempts),
                },
            )
            failure = PublishFailure(error.code.value, error.message, error.retryable, error.meta)
            outcomes = [WakeupFailed(failure)] * len(attempts)
        now = store.now()
        results = []
        for message, outcome in zip(messages, outcomes, strict=True):
            if isinstance(outcome, WakeupPublished):
                results.append(OutboxResult(message.id, True, outcome.provider_message_id))
                continue
            delay = min(OUTBOX_RETRY_MAX, OUTBOX_RETRY_INITIAL * 2 ** min(message.attempts, 16))
            results.append(
                OutboxResult(
                    message.id,
                    False,
                    error={
                        "code": outcome.error.code,
                        "message": outcome.error.message,
                        "retryable": outcome.error.retryable,
                        "meta": outcome.error.meta,
                        "occurred_at": now.isoformat(),
                    },
                    retry_at=now + timedelta(seconds=delay),
                )
            )
        await store.storage.settle_outbox(store.environment, results, now)
        published = sum(1 for r in results if r.published)
        if published < len(results):
            refused = next(r for r in results if not r.published)
            logger.warning(
                "%d of %d wakeups were not published and will be retried (first: %s)",
                len(results) - published,
                len(results),
                refused.error["message"] if refused.error else "?",
                extra={
                    "event": "outbox.publish_failed",
                    "error_code": refused.error["code"] if refused.error else None,
                    "count": len(results) - published,
                },
            )
        return published, len(results) - published

    async def publish_pending(self) -> tuple[int, int]:
        """Claim and publish every publishable outbox message (a tick duty)."""
        store = self._store
        total_published = total_failed = 0
        while True:
            now = store.now()
            batch = await store.storage.claim_outbox(
                store.environment, now, OUTBOX_BATCH, now + OUTBOX_CLAIM_WINDOW
            )
            published, failed = await self.publish(batch)
            total_published += published
            total_failed += failed
            if len(batch) < OUTBOX_BATCH:
                return total_published, total_failed

    async def request_due_deliveries(self) -> int:
        """Append delivery requests for runs that became due (a tick duty); a paused
        queue's runs get none (their wakeups would be ignored) until it is resumed."""
        store = self._store
        total = 0
        await self._pauses.current()
        policies = self._pauses.claimable(self.policies())
        if not policies:
            return 0
        while True:
            count = await store.storage.request_due_deliveries(
                store.environment, policies, store.now(), DELIVERY_REQUEST_BATCH
            )
            total += count
            if count < DELIVERY_REQUEST_BATCH:
                return total
