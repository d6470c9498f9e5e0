"""SNS topics with subscribed SQS queues on Ministack, as Terraform would create them.

``SnsWorld`` creates a topic, and per subscription a queue and a dead-letter queue
(with a redrive policy) subscribed through the subscription's filter policy with
raw delivery, then hands out the ``sns_subscription`` binding. It also turns
received SQS messages into the records Lambda passes to a handler.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest

from runlane.sns import SnsSubscriptionBinding, sns_filter_policy, sns_subscription
from runlane.topics.definitions import SubscriptionDef

REGION = "us-east-1"


class SnsWorld:
    """Creates (and at the end deletes) topics, queues and subscriptions on the emulator."""

    def __init__(self, sns: Any, sqs: Any) -> None:
        self.sns, self.sqs = sns, sqs
        self._topics: list[str] = []
        self._queues: list[str] = []

    def topic(self, prefix: str = "runlane-topic", *, fifo: bool = False) -> str:
        """A new SNS topic's ARN."""
        name = f"{prefix}-{uuid.uuid4().hex[:10]}" + (".fifo" if fifo else "")
        attributes = {"FifoTopic": "true"} if fifo else {}
        arn = str(self.sns.create_topic(Name=name, Attributes=attributes)["TopicArn"])
        self._topics.append(arn)
        return arn

    def queue(self, prefix: str, *, fifo: bool = False, **attributes: str) -> str:
        """A new SQS queue's URL."""
        name = f"{prefix}-{uuid.uuid4().hex[:10]}" + (".fifo" if fifo else "")
        if fifo:
            attributes["FifoQueue"] = "true"
        url = str(self.sqs.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"])
        self._queues.append(url)
        return url

    def queue_arn(self, url: str) -> str:
        """The ARN of the queue at ``url``."""
        response = self.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])
        return str(response["Attributes"]["QueueArn"])

    def subscribe(
        self,
        topic_arn: str,
        definition: SubscriptionDef,
        *,
        max_receive_count: int | None = None,
        visibility_timeout: int = 30,
    ) -> SnsSubscriptionBinding:
        """A queue and dead-letter queue for ``definition``, subscribed to ``topic_arn``."""
        fifo = topic_arn.endswith(".fifo")
        prefix = definition.name.replace(".", "-")
        dead_letters = self.queue(f"{prefix}-dlq", fifo=fifo)
        redrive = json.dumps(
            {
                "deadLetterTargetArn": self.queue_arn(dead_letters),
                "maxReceiveCount": max_receive_count or definition.retry.max_attempts + 5,
            }
        )
        url = self.queue(
            prefix, fifo=fifo, RedrivePolicy=redrive, VisibilityTimeout=str(visibility_timeout)
        )
        attributes = {"RawMessageDelivery": "true", "FilterPolicyScope": "MessageAttributes"}
        policy = sns_filter_policy(definition)
        if policy is not None:
            attributes["FilterPolicy"] = json.dumps(policy)
        self.sns.subscribe(
            TopicArn=topic_arn, Protocol="sqs", Endpoint=self.queue_arn(url), Attributes=attributes
        )
        return sns_subscription(definition, queue_url=url, dead_letter_queue_url=dead_letters)

    def receive(
        self, url: str, *, count: int = 10, wait: int = 1, visibility: int | None = None
    ) -> list[dict[str, Any]]:
        """Up to ``count`` messages with all their attributes."""
        params: dict[str, Any] = {
            "QueueUrl": url,
            "MaxNumberOfMessages": count,
            "WaitTimeSeconds": wait,
            "AttributeNames": ["All"],
            "MessageAttributeNames": ["All"],
        }
        if visibility is not None:
            params["VisibilityTimeout"] = visibility
        return list(self.sqs.receive_message(**params).get("Messages", []))

    def receive_all(self, url: str, *, expected: int, within: float = 10) -> list[dict[str, Any]]:
        """Receive until ``expected`` messages came (or the time is up), hiding them for 60 s."""
        found: list[dict[str, Any]] = []
        deadline = time.monotonic() + within
        while len(found) < expected and time.monotonic() < deadline:
            found.extend(self.receive(url, visibility=60))
        return found

    def event(self, url: str, messages: Sequence[dict[str, Any]]) -> dict[str, Any]:
        """The Lambda event an event source mapping on ``url`` would pass for ``messages``."""
        arn = self.queue_arn(url)
        return {"Records": [lambda_record(message, arn) for message in messages]}

    def bodies(self, url: str, *, expected: int, within: float = 10) -> list[str]:
        """The bodies of ``expected`` messages (deleted once read)."""
        messages = self.receive_all(url, expected=expected, within=within)
        self.delete(url, messages)
        return [message["Body"] for message in messages]

    def delete(self, url: str, messages: Sequence[dict[str, Any]]) -> None:
        """Delete received messages."""
        for message in messages:
            self.sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])

    def close(self) -> None:
        """Delete everything this world created."""
        for url in self._queues:
            with contextlib.suppress(Exception):
                self.sqs.delete_queue(QueueUrl=url)
        for arn in self._topics:
            with contextlib.suppress(Exception):
                self.sns.delete_topic(TopicArn=arn)


def lambda_record(message: dict[str, Any], event_source_arn: str) -> dict[str, Any]:
    """One received SQS message in the shape Lambda hands to a handler."""
    return {
        "messageId": message["MessageId"],
        "receiptHandle": message["ReceiptHandle"],
        "body": message["Body"],
        "attributes": dict(message.get("Attributes", {})),
        "messageAttributes": {
            name: {"stringValue": value.get("StringValue"), "dataType": value["DataType"]}
            for name, value in message.get("MessageAttributes", {}).items()
        },
        "md5OfBody": message.get("MD5OfBody"),
        "eventSource": "aws:sqs",
        "eventSourceARN": event_source_arn,
        "awsRegion": REGION,
    }


@pytest.fixture
def sns_world(sns_client: Any, sqs_client: Any) -> Iterator[SnsWorld]:
    """Fresh topics and queues for one test, deleted afterwards."""
    world = SnsWorld(sns_client, sqs_client)
    yield world
    world.close()


def wait_until(condition: Callable[[], bool], *, within: float, what: str) -> None:
    """Poll ``condition`` every 0.2 s until it holds, or fail naming ``what``."""
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)
