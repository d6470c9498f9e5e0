"""The SNS rules ``Runlane(...)`` checks, and runtime calls on SNS topics refused before any
AWS call (contract 5.11.1, 5.4.1 check 2, 5.8)."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import boto3
import pytest

from runlane import (
    ErrorCode,
    Runlane,
    RunlaneError,
    queue,
    sqlite_lane,
    subscription,
    topic,
)
from runlane.sns import SnsTransport, sns_subscription, sns_topic, sns_transport
from runlane.testing import on_lane
from runlane.topics.definitions import SubscriptionDef, TopicDef

OPTIONS = {"region_name": "us-east-1", "aws_access_key_id": "x", "aws_secret_access_key": "y"}
ARN = "arn:aws:sns:us-east-1:123456789012:orders"
QUEUE = "https://sqs.us-east-1.amazonaws.com/123456789012/orders-email"
DLQ = "https://sqs.us-east-1.amazonaws.com/123456789012/orders-email-dlq"
MAIN = queue("main", default=True)
ORDERS = topic("orders")


def handle(message: Any, ctx: Any) -> None:
    return None


def transport(
    topic_def: TopicDef = ORDERS, subscriptions: tuple[SubscriptionDef, ...] = (), **options: Any
) -> SnsTransport:
    return sns_transport(
        client=boto3.client("sns", **OPTIONS),
        topics=[sns_topic(topic_def, topic_arn=ARN)],
        subscriptions=[
            sns_subscription(sub, queue_url=QUEUE, dead_letter_queue_url=DLQ)
            for sub in subscriptions
        ],
        **options,
    )


def runtime(path: Path, sns: SnsTransport, **options: Any) -> Runlane:
    options.setdefault("topics", [ORDERS])
    return Runlane(
        lane=sqlite_lane(path / "app.db", topic_transport=sns), queues=[MAIN], tasks=[], **options
    )


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"mode": "ordered", "key": "customer"}, "mode 'ordered' needs a stored topic"),
        ({"mode": "exclusive", "key": "customer"}, "mode 'exclusive' needs a FIFO topic"),
    ],
)
def test_subscription_modes_sns_cannot_keep_are_refused_at_runlane(
    tmp_path: Path, options: dict[str, Any], words: str
) -> None:
    keyed = subscription("orders.ship", topic=ORDERS, handler=handle, **options)
    with pytest.raises(RunlaneError) as raised:
        runtime(tmp_path, transport(), subscriptions=[keyed])
    assert raised.value.code is ErrorCode.CONFIGURATION_INVALID
    assert words in str(raised.value)
    assert not (tmp_path / "app.db").exists()  # nothing was created


def test_a_subscription_of_an_sns_topic_needs_its_binding(tmp_path: Path) -> None:
    email = subscription("orders.email", topic=ORDERS, handler=handle)
    with pytest.raises(RunlaneError) as raised:
        runtime(tmp_path, transport(), subscriptions=[email])
    assert raised.value.code is ErrorCode.CONFIGURATION_INVALID
    assert "sns_subscription" in str(raised.value)


def test_a_bound_topic_the_runtime_does_not_register_is_refused(tmp_path: Path) -> None:
    with pytest.raises(RunlaneError) as raised:
        runtime(tmp_path, transport(), topics=[topic("invoices")])
    assert raised.value.code is ErrorCode.CONFIGURATION_INVALID
    assert "'orders'" in str(raised.value)


@pytest.mark.parametrize("bad", [ORDERS, "orders", [ORDERS, "x"]])
def test_topics_must_be_a_list_of_definitions(tmp_path: Path, bad: Any) -> None:
    with pytest.raises(RunlaneError) as raised:
        runtime(tmp_path, transport(), topics=bad)
    assert raised.value.code is ErrorCode.CONFIGURATION_INVALID


def test_a_stored_and_an_sns_topic_of_one_name_are_refused(tmp_path: Path) -> None:
    with pytest.raises(RunlaneError) as raised:
        runtime(tmp_path, transport(), topics=[ORDERS, topic("orders")])
    assert raised.value.code is ErrorCode.CONFIGURATION_INVALID


async def test_sns_publish_options_are_refused_before_anything_is_sent(tmp_path: Path) -> None:
    # The SNS client points nowhere: a call reaching it would fail differently.
    email = subscription("orders.email", topic=ORDERS, handler=handle)
    rl = runtime(tmp_path, transport(subscriptions=(email,)), subscriptions=[email])
    async with rl:
        for options in ({"deduplication_key": "k"}, {"connection": object()}):
            with pytest.raises(RunlaneError) as raised:
                await rl.publish(ORDERS, {"id": 1}, **options)
            assert raised.value.code is ErrorCode.CAPABILITY_UNSUPPORTED
            assert raised.value.meta["option"] in options
        with pytest.raises(RunlaneError) as unknown:
            await rl.publish("invoices", 1)
        assert unknown.value.code is ErrorCode.TOPIC_NOT_FOUND
        with pytest.raises(RunlaneError) as differing:
            await rl.publish(topic("orders", deduplication_window="1h"), 1)
        assert differing.value.code is ErrorCode.CONFIGURATION_INVALID
    with sqlite3.connect(tmp_path / "app.db") as db:
        assert db.execute("select count(*) from runlane_messages").fetchone() == (0,)


async def test_sns_dead_letters_need_the_sqs_client(tmp_path: Path) -> None:
    email = subscription("orders.email", topic=ORDERS, handler=handle)
    rl = runtime(tmp_path, transport(subscriptions=(email,)), subscriptions=[email])
    async with rl:
        with pytest.raises(RunlaneError) as raised:
            await rl.dead_letters.list(subscription=email)
        assert raised.value.code is ErrorCode.CAPABILITY_UNSUPPORTED
        with pytest.raises(RunlaneError) as without_subscription:
            await rl.dead_letters.list(topic="orders")
        assert without_subscription.value.code is ErrorCode.CONFIGURATION_INVALID
        assert (await rl.subscriptions.halted_keys(email)).data == []


def test_a_lane_swapped_in_must_carry_the_sns_topics(tmp_path: Path) -> None:
    email = subscription("orders.email", topic=ORDERS, handler=handle)
    rl = runtime(tmp_path, transport(subscriptions=(email,)), subscriptions=[email])
    with pytest.raises(RunlaneError) as raised, on_lane(rl, sqlite_lane(tmp_path / "t.db")):
        pass
    assert raised.value.code is ErrorCode.CONFIGURATION_INVALID
    other = transport(subscriptions=(email,))
    with on_lane(rl, sqlite_lane(tmp_path / "t.db", topic_transport=other)) as swapped:
        assert swapped.brokered_topics is not None
        assert swapped.brokered_topics.transport is other
    assert rl.brokered_topics is not None and rl.brokered_topics.transport is not other
