"""The orders topic and its two subscriptions: shared by the publisher and the consumers.

Each subscription runs in its own Lambda function, behind its own SQS queue and
dead-letter queue (see main.tf). Handlers key their side effects on ``message.id``:
SQS delivers at least once, and a replayed dead letter comes back with the same id.
"""

from __future__ import annotations

import logging

from pydantic import BaseModel

from runlane import RetryPolicy
from runlane.topics.definitions import SubscriptionDef, subscription, topic
from runlane.topics.messages import DeliveryContext, Message
from runlane.topics.outcomes import FatalWorkError, Outcome

logger = logging.getLogger("orders")


class OrderEvent(BaseModel):
    order_id: str
    customer: str
    total_cents: int


orders = topic("orders", schema=OrderEvent)


@subscription(
    "orders.email",
    topic=orders,
    filter={"event": ["created", "paid"]},
    retry=RetryPolicy(max_attempts=5, initial_delay="10s", max_delay="15m"),
    timeout="20s",
)
async def email_customer(message: Message[OrderEvent], ctx: DeliveryContext) -> Outcome | None:
    """Send the customer an email about their order (once per message id)."""
    order = message.payload
    if not order.customer:
        return Outcome.dead_letter("the order has no customer to email")
    logger.info(
        "emailing %s about order %s (message %s, attempt %d)",
        order.customer,
        order.order_id,
        message.id,
        ctx.attempt,
    )
    return None


@subscription("orders.audit", topic=orders, filter={"event": ["paid", "refunded"]})
def audit_payment(message: Message[OrderEvent], ctx: DeliveryContext) -> None:
    """Record every payment and refund (a sync handler: it runs on a worker thread)."""
    if message.payload.total_cents < 0:
        raise FatalWorkError("a negative total cannot be audited")
    logger.info(
        "audit: %s of order %s for %d cents",
        message.attributes["event"],
        message.payload.order_id,
        message.payload.total_cents,
    )


SUBSCRIPTIONS: dict[str, SubscriptionDef] = {
    definition.name: definition for definition in (email_customer, audit_payment)
}
