"""Publishing order events to the SNS topic, and reading a subscription's dead letters.

The topic's ARN comes from ``terraform output topic_arn``; the queue URLs of the
subscriptions (for their dead letters) from ``terraform output queues``.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime

import boto3
from orders import SUBSCRIPTIONS, OrderEvent, orders

from runlane.sns import SnsTransport, TopicPublished, sns_subscription, sns_topic, sns_transport


def build_transport() -> SnsTransport:
    """The transport of the orders topic, bound to what Terraform created."""
    queues = json.loads(os.environ["ORDERS_QUEUES"])  # terraform output -json queues
    return sns_transport(
        client=boto3.client("sns"),
        sqs_client=boto3.client("sqs"),
        topics=[sns_topic(orders, topic_arn=os.environ["ORDERS_TOPIC_ARN"])],
        subscriptions=[
            sns_subscription(
                definition,
                queue_url=queues[name]["queue_url"],
                dead_letter_queue_url=queues[name]["dead_letter_queue_url"],
            )
            for name, definition in SUBSCRIPTIONS.items()
        ],
    )


async def publish_order_event(
    transport: SnsTransport, event: str, order: OrderEvent, *, message_id: str | None = None
) -> TopicPublished:
    """Publish one order event; reuse ``message_id`` when retrying a failed publish."""
    return await transport.publish_message(
        orders,
        order,
        attributes={"event": event},
        message_id=message_id,
        environment=os.environ.get("ORDERS_ENVIRONMENT", "production"),
        now=datetime.now(UTC),
    )
