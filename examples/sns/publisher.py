"""The app side: a runtime that publishes order events to the SNS topic and reads a
subscription's dead letters.

The topic's ARN comes from ``terraform output topic_arn``; the queue URLs of the
subscriptions (for their dead letters and counts) from ``terraform output queues``.
The app's own lane (a SQLite file here) holds its tasks and any stored topics; the
orders topic is brokered, so nothing about it is written there.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import boto3
from orders import SUBSCRIPTIONS, OrderEvent, orders

from runlane import Runlane, sqlite_lane
from runlane.sns import SnsTransport, sns_subscription, sns_topic, sns_transport
from runlane.topics.records import DeadLetter, PublishReceipt


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


def build_runtime(path: str | Path = "app.db") -> Runlane:
    """The app's runtime: its lane carries the orders topic to SNS."""
    return Runlane(
        lane=sqlite_lane(path, topic_transport=build_transport()),
        queues=[],
        tasks=[],
        topics=[orders],
        subscriptions=list(SUBSCRIPTIONS.values()),
        environment=os.environ.get("ORDERS_ENVIRONMENT", "production"),
    )


async def publish_order_event(
    rl: Runlane, event: str, order: OrderEvent, *, message_id: str | None = None
) -> PublishReceipt:
    """Publish one order event; reuse ``message_id`` when retrying a failed publish."""
    return await rl.publish(orders, order, attributes={"event": event}, message_id=message_id)


async def dead_letters(rl: Runlane, subscription: str) -> list[DeadLetter]:
    """A subscription's dead letters (one best-effort scan of its dead-letter queue)."""
    return (await rl.dead_letters.list(subscription=subscription)).data
