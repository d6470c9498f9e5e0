"""Lanes carry a topic transport: ``topic_transport=`` and ``postgres_sqs_lane(..., sns=)``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import boto3
import pytest

from runlane import ErrorCode, RunlaneError, postgres_sqs_lane, queue, sqlite_lane
from runlane.sns import sns_topic, sns_transport
from runlane.sqs import sqs_queue, sqs_transport
from runlane.topics.definitions import topic

OPTIONS = {"region_name": "us-east-1", "aws_access_key_id": "x", "aws_secret_access_key": "y"}


def transport() -> Any:
    return sns_transport(
        client=boto3.client("sns", **OPTIONS),
        topics=[sns_topic(topic("orders"), topic_arn="arn:aws:sns:us-east-1:123456789012:orders")],
    )


async def test_a_sqlite_lane_opens_and_closes_its_topic_transport(tmp_path: Path) -> None:
    sns = transport()
    lane = sqlite_lane(tmp_path / "runlane.db", topic_transport=sns)
    assert lane.topic_transport is sns and lane.transport is None
    await lane.open()
    await lane.close()


def test_postgres_sqs_lane_takes_the_sns_transport() -> None:
    sns = transport()
    sqs = sqs_transport(
        client=boto3.client("sqs", **OPTIONS),
        queues=[sqs_queue(queue("main"), queue_url="https://sqs.us-east-1.amazonaws.com/1/main")],
    )
    lane = postgres_sqs_lane(postgres="postgresql://app@db/app", sqs=sqs, sns=sns)
    assert lane.transport is sqs and lane.topic_transport is sns
    assert postgres_sqs_lane(postgres="postgresql://app@db/app", sqs=sqs).topic_transport is None


@pytest.mark.parametrize("bad", ["sns", object(), sqs_queue])
def test_anything_but_a_topic_transport_is_refused(tmp_path: Path, bad: Any) -> None:
    with pytest.raises(RunlaneError) as raised:
        sqlite_lane(tmp_path / "runlane.db", topic_transport=bad)
    assert raised.value.code is ErrorCode.CONFIGURATION_INVALID


async def test_a_topic_transport_that_cannot_open_leaves_nothing_open(tmp_path: Path) -> None:
    calls: list[str] = []

    class Wakeups:
        """A wakeup transport that records its lifecycle."""

        async def open(self) -> None:
            calls.append("wakeups opened")

        async def close(self) -> None:
            calls.append("wakeups closed")

    class Unreachable:
        """A topic transport whose open fails (as a broker's could)."""

        name = "unreachable"

        def carries(self, topic: Any) -> bool:
            return True

        def carries_subscription(self, subscription: Any) -> bool:
            return False

        def check_registration(self, **definitions: Any) -> frozenset[str]:
            return frozenset()

        async def open(self) -> None:
            raise RuntimeError("no broker")

        async def close(self) -> None:
            calls.append("topic transport closed")  # never opened: must not happen

        async def publish_message(self, *args: Any, **kwargs: Any) -> Any:
            raise AssertionError("not called")

        # The broker's operator calls (never reached here).
        list_dead_letters = get_dead_letter = publish_message
        replay_dead_letter = discard_dead_letter = subscription_counts = publish_message

    lane = sqlite_lane(tmp_path / "runlane.db", transport=Wakeups(), topic_transport=Unreachable())
    with pytest.raises(RuntimeError):
        await lane.open()
    assert calls == ["wakeups opened", "wakeups closed"]
